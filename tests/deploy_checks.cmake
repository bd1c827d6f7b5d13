# The deployment files (deploy/systemd, deploy/k8s, deploy/container, deploy/tls) against each
# other and the built binaries: tests/deploy_checks.sh (systemd-analyze, kubectl kustomize,
# yamllint, ldd + dpkg, openssl). Exit 77 (skipped) when one of those tools is missing.
if(TARGET ps_scheduler AND TARGET psctl)
  add_test(NAME deploy_checks
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy_checks.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(deploy_checks PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS deploy)
endif()
