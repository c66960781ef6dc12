# gloo tests (spec/TIERS.md 4.7), where libgloo was found: test_gloo_comm (the communicator on loopback,
# ranks as threads), and the tiers' own tests link it to run a job over it too (CKPT_TEST_GLOO).
if(NOT CKPT_HAVE_GLOO)
  return()
endif()
target_link_libraries(test_gloo_comm PRIVATE ckpt::gloo)
target_link_libraries(test_tiered PRIVATE ckpt::gloo)
target_compile_definitions(test_tiered PRIVATE CKPT_TEST_GLOO=1)
