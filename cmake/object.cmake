# Object storage (spec/OBJECT.md 2): ckpt::s3, the S3 client over libcurl (HTTP, SigV4), pugixml (XML)
# and zlib (CRC32 part checksums). Optional: without these packages, or with -DCKPT_S3=OFF, nothing of
# it is built and CKPT_HAVE_S3 is OFF. The object headers stay outside ckpt.hpp and store.hpp.
option(CKPT_S3 "Build the S3 object-store client (libcurl, pugixml) when they are available" ON)
set(CKPT_HAVE_S3 OFF)
if(CKPT_S3)
  find_package(CURL 7.75 QUIET)  # CURLOPT_AWS_SIGV4 came with 7.75
  find_package(pugixml QUIET)
  find_package(ZLIB QUIET)
  if(CURL_FOUND AND pugixml_FOUND AND ZLIB_FOUND)
    set(CKPT_HAVE_S3 ON)
  else()
    message(STATUS "ckpt: S3 client off (needs libcurl >= 7.75, pugixml and zlib: libcurl4-openssl-dev libpugixml-dev zlib1g-dev)")
  endif()
endif()

if(CKPT_HAVE_S3)
  # Like ckpt::compiled: with it, the client's definitions are compiled once (src/s3_client.cpp) and
  # its users parse declarations only; without it, ckpt::s3 is header-only as ckpt::ckpt is.
  if(CKPT_COMPILED)
    add_library(ckpt_s3 STATIC ${CMAKE_CURRENT_SOURCE_DIR}/src/s3_client.cpp)
    set_target_properties(ckpt_s3 PROPERTIES EXPORT_NAME s3 POSITION_INDEPENDENT_CODE ON)
    target_link_libraries(ckpt_s3 PUBLIC ckpt_compiled PRIVATE CURL::libcurl pugixml::pugixml ZLIB::ZLIB)
  else()
    add_library(ckpt_s3 INTERFACE)
    set_target_properties(ckpt_s3 PROPERTIES EXPORT_NAME s3)
    target_link_libraries(ckpt_s3 INTERFACE ckpt CURL::libcurl pugixml::pugixml ZLIB::ZLIB)
  endif()
  add_library(ckpt::s3 ALIAS ckpt_s3)
endif()
