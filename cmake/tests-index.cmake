# test_index runs ckpt-verify on the issue 9 file under ulimit -v (it skips that check when tools are off).
if(TARGET test_index AND TARGET ckpt-verify)
  add_dependencies(test_index ckpt-verify)
endif()
