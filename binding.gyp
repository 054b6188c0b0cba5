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
        "native/src/widen-q5-0.cc",
        "native/src/kernels-avx512.cc",
        "native/src/kernels-avx2.cc",
        "native/src/kernels-portable.cc",
        "native/vendor/libaegis/src/common/common.c",
        "native/vendor/libaegis/src/common/cpu.c",
        "native/vendor/libaegis/src/common/softaes.c",
        "native/vendor/libaegis/src/aegis256x4/aegis256x4.c",
        "native/vendor/libaegis/src/aegis256x4/aegis256x4_aesni.c",
        "native/vendor/libaegis/src/aegis256x4/aegis256x4_altivec.c",
        "native/vendor/libaegis/src/aegis256x4/aegis256x4_armcrypto.c",
        "native/vendor/libaegis/src/aegis256x4/aegis256x4_avx2.c",
        "native/vendor/libaegis/src/aegis256x4/aegis256x4_avx512.c",
        "native/vendor/libaegis/src/aegis256x4/aegis256x4_soft.c"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native/vendor/libaegis/src/include"],
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
