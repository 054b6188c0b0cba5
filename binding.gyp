{
  "targets": [
    {
      "target_name": "kvfence_native",
      "sources": [
        "native/src/addon.cc",
        "native/src/aead.cc",
        "native/src/dispatch.cc",
        "native/src/thread-pool.cc",
        "native/src/xxh3.cc",
        "native/src/xxh3-avx2.cc",
        "native/src/kernels-avx512.cc",
        "native/src/kernels-avx2.cc",
        "native/src/kernels-portable.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags": ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fvisibility=hidden"],
      "cflags_cc": ["-fexceptions", "-O3", "-ffp-contract=off", "-fno-fast-math", "-fvisibility=hidden"],
      "xcode_settings": {
        "GCC_ENABLE_CPP_EXCEPTIONS": "YES",
        "CLANG_CXX_LANGUAGE_STANDARD": "c++17",
        "OTHER_CFLAGS": ["-O3", "-ffp-contract=off", "-fvisibility=hidden"]
      },
      "msvs_settings": {
        "VCCLCompilerTool": { "ExceptionHandling": 1, "AdditionalOptions": ["/fp:precise"] }
      }
    }
  ]
}
