// AES-256-GCM for the secure channel's frames (src/wire/frame-aead.ts), through the OpenSSL that node itself carries:
// node exports its libcrypto's symbols to addons and ships its headers beside node_api.h, so this is node:crypto's
// own cipher, called without node:crypto's per-call allocations. Each call writes into a buffer the caller owns: a
// receiver deciphers each socket read straight into the frame's plaintext buffer, a sender seals a frame's pages into
// one buffer that becomes the wire frame (docs/protocol.md §8 measures both paths).
//
// One Gcm object per direction of a channel: the key is expanded once, and each frame re-initialises only its nonce
// and AAD. The object is a small state machine (idle → started → idle) and refuses calls out of order; a tag that
// fails, or an update that throws, ends the frame (idle again: the next frame starts afresh). `dispose` frees the
// context, and with it the expanded key (EVP_CIPHER_CTX_free cleanses it); the finalizer does the same for one nobody
// disposed.
#include "aead.h"

#include <openssl/evp.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace kvf {
namespace {

constexpr size_t kKeyBytes = 32;
constexpr size_t kNonceBytes = 12;
constexpr size_t kTagBytes = 16;
// OpenSSL's lengths are ints: one call takes at most 1 GiB here (frames are far smaller: LIMITS.transferFrameBytesMax)
constexpr size_t kCallBytesMax = size_t{1} << 30;

struct Bytes {
  uint8_t* data;
  size_t length;
};

Bytes bytesOf(Napi::Env env, const Napi::Value& v, const char* name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(env, std::string(name) + " must be a Uint8Array");
  }
  auto a = v.As<Napi::Uint8Array>();
  return {a.Data(), a.ByteLength()};
}

class Gcm : public Napi::ObjectWrap<Gcm> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Gcm",
                       {InstanceMethod<&Gcm::Start>("start"), InstanceMethod<&Gcm::Update>("update"),
                        InstanceMethod<&Gcm::FinishSeal>("finishSeal"), InstanceMethod<&Gcm::FinishOpen>("finishOpen"),
                        InstanceMethod<&Gcm::Dispose>("dispose")});
  }

  // new Gcm(key: 32 bytes, seal: boolean)
  explicit Gcm(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Gcm>(info) {
    const Napi::Env env = info.Env();
    if (info.Length() != 2 || !info[1].IsBoolean()) throw Napi::TypeError::New(env, "new Gcm(key, seal)");
    const Bytes key = bytesOf(env, info[0], "the key");
    if (key.length != kKeyBytes) throw Napi::RangeError::New(env, "the key must be 32 bytes");
    seal_ = info[1].As<Napi::Boolean>().Value();
    ctx_ = EVP_CIPHER_CTX_new();
    // EVP_Cipher*: one set of calls for both directions, chosen here once (later inits pass -1: keep it)
    if (ctx_ == nullptr || EVP_CipherInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key.data, nullptr, seal_ ? 1 : 0) != 1) {
      free();
      throw Napi::Error::New(env, "AES-256-GCM could not be set up");
    }
  }

  ~Gcm() override { free(); }

 private:
  // start(nonce: 12 bytes, aad): begins a frame
  void Start(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    live(env);
    if (started_) throw Napi::Error::New(env, "a frame was started and not finished");
    if (info.Length() != 2) throw Napi::TypeError::New(env, "start(nonce, aad)");
    const Bytes nonce = bytesOf(env, info[0], "the nonce");
    const Bytes aad = bytesOf(env, info[1], "the AAD");
    if (nonce.length != kNonceBytes) throw Napi::RangeError::New(env, "the nonce must be 12 bytes");
    if (aad.length > kCallBytesMax) throw Napi::RangeError::New(env, "the AAD is too long");
    int n = 0;
    if (EVP_CipherInit_ex(ctx_, nullptr, nullptr, nullptr, nonce.data, -1) != 1 ||
        EVP_CipherUpdate(ctx_, nullptr, &n, aad.data, static_cast<int>(aad.length)) != 1)
      throw Napi::Error::New(env, "AES-256-GCM could not start a frame");
    started_ = true;
  }

  // update(input, output, at): the input's bytes, sealed or opened, into output[at, at + input.length); they may be
  // the same bytes (in place), but not overlap otherwise. A call that throws ends the frame.
  void Update(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    frame(env);
    started_ = false;  // until this call has done its part
    if (info.Length() != 3 || !info[2].IsNumber()) throw Napi::TypeError::New(env, "update(input, output, at)");
    const Bytes in = bytesOf(env, info[0], "the input");
    const Bytes out = bytesOf(env, info[1], "the output");
    const double at = info[2].As<Napi::Number>().DoubleValue();
    // compared as doubles before any cast (a cast of an out-of-range double is undefined)
    if (!(at >= 0) || at != std::floor(at) || at > static_cast<double>(out.length) ||
        static_cast<double>(in.length) > static_cast<double>(out.length) - at) {
      throw Napi::RangeError::New(env, "the output has no room for the input at that offset");
    }
    if (in.length > kCallBytesMax) throw Napi::RangeError::New(env, "the input is too long for one call");
    uint8_t* dst = out.data + static_cast<size_t>(at);
    const auto from = reinterpret_cast<uintptr_t>(in.data);
    const auto to = reinterpret_cast<uintptr_t>(dst);
    if (from != to && from < to + in.length && to < from + in.length) {
      throw Napi::RangeError::New(env, "the input and the output overlap (only the very same bytes may be both)");
    }
    int n = 0;
    const int len = static_cast<int>(in.length);
    // GCM is a stream mode: OpenSSL writes every byte it is given at once; anything else would misplace the next call
    if (EVP_CipherUpdate(ctx_, dst, &n, in.data, len) != 1 || n != len) {
      throw Napi::Error::New(env, "AES-256-GCM update failed");
    }
    started_ = true;
  }

  // finishSeal(tag: 16 bytes out): ends a sealed frame, writing its tag
  void FinishSeal(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    frame(env);
    if (!seal_) throw Napi::Error::New(env, "this Gcm opens; finishOpen ends its frames");
    const Bytes tag = tagOf(info, "finishSeal(tag)");
    started_ = false;
    int n = 0;
    if (EVP_EncryptFinal_ex(ctx_, nullptr, &n) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), tag.data) != 1) {
      throw Napi::Error::New(env, "AES-256-GCM could not finish a frame");
    }
  }

  // finishOpen(tag: 16 bytes) → whether the frame is authentic: false means nothing it deciphered may be used
  Napi::Value FinishOpen(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    frame(env);
    if (seal_) throw Napi::Error::New(env, "this Gcm seals; finishSeal ends its frames");
    const Bytes tag = tagOf(info, "finishOpen(tag)");
    started_ = false;
    int n = 0;
    const bool authentic =
        EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), tag.data) == 1 &&
        EVP_DecryptFinal_ex(ctx_, nullptr, &n) == 1;
    return Napi::Boolean::New(env, authentic);
  }

  // dispose(): frees the context and its expanded key now; later calls throw
  void Dispose(const Napi::CallbackInfo&) { free(); }

  // a finish's one argument: the frame's 16-byte tag
  static Bytes tagOf(const Napi::CallbackInfo& info, const char* call) {
    const Napi::Env env = info.Env();
    if (info.Length() != 1) throw Napi::TypeError::New(env, call);
    const Bytes tag = bytesOf(env, info[0], "the tag");
    if (tag.length != kTagBytes) throw Napi::RangeError::New(env, "the tag must be 16 bytes");
    return tag;
  }

  void live(Napi::Env env) const {
    if (ctx_ == nullptr) throw Napi::Error::New(env, "this Gcm was disposed");
  }
  void frame(Napi::Env env) const {
    live(env);
    if (!started_) throw Napi::Error::New(env, "no frame was started");
  }
  void free() {
    EVP_CIPHER_CTX_free(ctx_);  // cleanses the expanded key; a null context is a no-op
    ctx_ = nullptr;
    started_ = false;
  }

  EVP_CIPHER_CTX* ctx_ = nullptr;
  bool seal_ = true;
  bool started_ = false;
};

}  // namespace

Napi::Function DefineGcm(Napi::Env env) { return Gcm::Define(env); }

}  // namespace kvf
