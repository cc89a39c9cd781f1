# Tests of common/jobfile.c (job file + DeepSpeed config) and common/json_locate.c.
zt_add_test(NAME test_json_locate SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_json_locate.c
            LIBS zt_common LABELS unit TIMEOUT 60)
zt_add_test(NAME test_jobfile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_jobfile.c
            LIBS zt_common LABELS unit TIMEOUT 60)
target_compile_definitions(test_jobfile PRIVATE
                           ZT_JOBFILES_DIR="${CMAKE_CURRENT_LIST_DIR}/jobfiles")
# DeepSpeed configs as projects publish them: each plans and trains two steps on two CPU ranks.
if(TARGET zctl AND TARGET zworker)
  zt_add_script_test(NAME test_ds_published
                     COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_ds_published.py
                     LABELS integration TIMEOUT 600)
endif()
if(TARGET zctl)
  zt_add_script_test(NAME test_ds_doc COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_ds_doc.sh
                     LABELS unit TIMEOUT 60)
endif()
# docs/env.md lists every ZT_* variable the code reads.
zt_add_script_test(NAME test_env_doc COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_env_doc.sh
                   LABELS unit TIMEOUT 60)
