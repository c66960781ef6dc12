# Every tool takes s3://bucket/prefix where it takes a store path when the S3 client is built
# (cmake/object.cmake, spec/OBJECT.md): tools/cli.hpp's object_opener.
if(CKPT_HAVE_S3)
  foreach(tool ${CKPT_PROGRAMS})
    target_link_libraries(${tool} PRIVATE ckpt::s3)
    target_compile_definitions(${tool} PRIVATE CKPT_HAVE_S3=1)
  endforeach()
endif()
