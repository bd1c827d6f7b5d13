#!/usr/bin/env bash
# Makes a test certificate authority and node certificates for the daemons' and psctl's
# --tls_ca / --tls_cert / --tls_key flags (docs/deploy.md). For tests and small clusters; a
# real deployment may use its own PKI instead: any PEM CA, certificates and keys will do.
#
# Usage: deploy/tls/make-certs.sh OUTDIR NAME[=SAN,SAN,...] ...
#   OUTDIR/ca.crt, OUTDIR/ca.key   the CA: made when OUTDIR has none, reused otherwise (so more
#                                  node certificates can be added later); every new OUTDIR gets
#                                  a CA of its own, which trusts none of another's certificates
#   OUTDIR/NAME.crt, OUTDIR/NAME.key   one per NAME, signed by the CA, usable as a server and a
#                                  client certificate (extended key usage serverAuth, clientAuth)
# Subject alternative names: NAME alone gets DNS:NAME, DNS:localhost and IP:127.0.0.1;
# NAME=a,b,... gets DNS:NAME and the listed ones: an IPv4 or IPv6 address is an IP SAN, anything
# else a DNS SAN (wildcards like *.ps-server.paramserver.svc.cluster.local allowed).
#   make-certs.sh /etc/paramserver/tls scheduler=sched.example.com,10.0.0.10 \
#     server-0=10.0.0.11 worker-0=10.0.0.21 psctl
# Keys: EC P-256 (PS_CERT_KEY=rsa: RSA 2048), unencrypted, mode 0600. Validity: the CA 10 years,
# node certificates PS_CERT_DAYS (default 825) days. An existing NAME.crt is replaced.
set -euo pipefail

die() { echo "make-certs: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: $0 OUTDIR NAME[=SAN,SAN,...] ..."
command -v openssl >/dev/null || die "openssl is missing (Debian: apt-get install openssl)"
out=$1
shift
days=${PS_CERT_DAYS:-825}
case ${PS_CERT_KEY:-ec} in
  ec) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256); usage=digitalSignature ;;
  rsa) newkey=(-newkey rsa:2048); usage=digitalSignature,keyEncipherment ;;
  *) die "PS_CERT_KEY must be ec or rsa, not '${PS_CERT_KEY}'" ;;
esac

umask 077
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -e "$out/ca.crt" ] || [ -e "$out/ca.key" ]; then
  [ -s "$out/ca.crt" ] && [ -s "$out/ca.key" ] || die "$out has only one of ca.crt and ca.key"
  echo "make-certs: using the CA in $out"
else
  # A random serial and name: two CAs made in the same second still differ.
  openssl req -x509 -new -nodes "${newkey[@]}" -keyout "$out/ca.key" -out "$out/ca.crt" \
    -days 3650 -sha256 -subj "/O=paramserver/CN=paramserver test CA $(openssl rand -hex 4)" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  chmod 0644 "$out/ca.crt"
  echo "make-certs: new CA in $out/ca.crt"
fi

ipv4='^([0-9]{1,3}\.){3}[0-9]{1,3}$'
for arg in "$@"; do
  name=${arg%%=*}
  [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "bad name '$name' (letters, digits, . _ -)"
  [ "$name" != ca ] || die "'ca' is the CA's name; pick another"
  if [[ $arg == *=* ]]; then
    IFS=, read -r -a sans <<<"${arg#*=}"
  else
    sans=(localhost 127.0.0.1)
  fi
  list="DNS:$name"
  for san in "${sans[@]}"; do
    [ -n "$san" ] || continue
    if [[ $san =~ $ipv4 || $san == *:* ]]; then
      list+=",IP:$san"
    elif [[ $san =~ ^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]]; then
      list+=",DNS:$san"
    else
      die "bad subject alternative name '$san' for $name"
    fi
  done
  cat >"$tmp/$name.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,$usage
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$list
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
EXT
  openssl req -new -nodes "${newkey[@]}" -keyout "$tmp/$name.key" -out "$tmp/$name.csr" \
    -subj "/O=paramserver/CN=$name" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  openssl x509 -req -in "$tmp/$name.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 \
    -extfile "$tmp/$name.ext" -out "$tmp/$name.crt" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  mv "$tmp/$name.key" "$out/$name.key"
  mv "$tmp/$name.crt" "$out/$name.crt"
  chmod 0600 "$out/$name.key"
  chmod 0644 "$out/$name.crt"
  echo "make-certs: $out/$name.crt ($list)"
done
