# ckpt-bench-ranks measures multi-rank saves and loads over MPI (spec/SHARDING.md 9). The programs glob
# (cmake/tools.cmake, bench/) builds it everywhere; with MPI it links MPI and gets CKPT_BENCH_HAVE_MPI, without it is a stub that
# says so and exits 2.
if(TARGET ckpt-bench-ranks AND CKPT_HAVE_MPI)
  target_link_libraries(ckpt-bench-ranks PRIVATE MPI::MPI_CXX)
  target_compile_definitions(ckpt-bench-ranks PRIVATE CKPT_BENCH_HAVE_MPI=1)
endif()
# ckpt-bench-tiers measures the tiers (spec/TIERS.md) against memcpy and MpiComm send/recv, and a
# restarted job's start and load from each tier; bench/bench-tiers.py drives it. Same arrangement.
if(TARGET ckpt-bench-tiers AND CKPT_HAVE_MPI)
  target_link_libraries(ckpt-bench-tiers PRIVATE MPI::MPI_CXX)
  target_compile_definitions(ckpt-bench-tiers PRIVATE CKPT_BENCH_HAVE_MPI=1)
  if(CKPT_HAVE_GLOO)  # --transport gloo: the tiers over GlooComm, bootstrapped through MPI (spec/TIERS.md 4.7)
    target_link_libraries(ckpt-bench-tiers PRIVATE ckpt::gloo)
    target_compile_definitions(ckpt-bench-tiers PRIVATE CKPT_BENCH_HAVE_GLOO=1)
  endif()
endif()
