// RAII ownership of one libuv handle (src/README.md, rule 3, after Node's handle_wrap and CMake's
// cmUVHandlePtr): the handle's memory is heap-allocated and freed only in the uv_close callback,
// so it may outlive its C++ owner by a loop turn. close() is idempotent.
#pragma once

#include <uv.h>

#include <utility>

namespace sidelock::event {

template <typename T>
class UvHandle {
 public:
  UvHandle() = default;
  ~UvHandle() { close(); }
  UvHandle(const UvHandle&) = delete;
  UvHandle& operator=(const UvHandle&) = delete;
  UvHandle(UvHandle&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  UvHandle& operator=(UvHandle&& o) noexcept {
    if (this != &o) {
      close();
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }

  /// Allocates the handle (zeroed) and sets handle->data. The caller then runs uv_X_init on get().
  T* allocate(void* data) {
    close();
    handle_ = new T{};
    handle_->data = data;
    return handle_;
  }
  T* get() const { return handle_; }
  uv_handle_t* raw() const { return reinterpret_cast<uv_handle_t*>(handle_); }
  explicit operator bool() const { return handle_ != nullptr; }

  /// Starts closing: data is cleared so no later callback reaches the owner; memory is freed in
  /// the close callback. Safe on an allocated-but-never-initialised handle only if T's init ran,
  /// so call allocate() immediately before uv_X_init and reset() if init fails.
  void close() {
    if (handle_ == nullptr) return;
    uv_handle_t* h = raw();
    handle_ = nullptr;
    h->data = nullptr;
    if (!uv_is_closing(h)) uv_close(h, [](uv_handle_t* closed) { delete reinterpret_cast<T*>(closed); });
  }
  /// For a handle whose uv_X_init failed: frees it without uv_close.
  void discardUninitialised() {
    delete handle_;
    handle_ = nullptr;
  }

 private:
  T* handle_ = nullptr;
};

}  // namespace sidelock::event
