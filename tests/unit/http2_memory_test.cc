#include "http/http2_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace sidelock::http {
namespace {

TEST(Http2MemoryTest, BlocksHoldWhatWasAskedAndAreAligned) {
  Http2Memory memory;
  std::vector<void*> blocks;
  for (size_t size : {0, 1, 47, 48, 49, 100, 1000, 1008, 1009, 5000, 100000}) {
    void* p = memory.allocate(size);
    ASSERT_NE(p, nullptr) << size;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << size;
    memset(p, 0xab, size);  // writable to its end (ASan / valgrind would say otherwise)
    blocks.push_back(p);
  }
  for (void* p : blocks) memory.release(p);
  memory.release(nullptr);  // as free(NULL)
}

TEST(Http2MemoryTest, FreedBlocksOfAClassAreReused) {
  Http2Memory memory;
  void* a = memory.allocate(100);
  memory.release(a);
  void* b = memory.allocate(90);  // the same 64-byte class (with its header)
#if defined(SIDELOCK_ASAN) || defined(__SANITIZE_ADDRESS__)
  (void)a;  // nothing is kept under ASan
#else
  EXPECT_EQ(a, b);
#endif
  memory.release(b);
}

TEST(Http2MemoryTest, CallocZeroesAndRefusesAnOverflow) {
  Http2Memory memory;
  auto* dirty = static_cast<unsigned char*>(memory.allocate(200));
  memset(dirty, 0xff, 200);
  memory.release(dirty);
  auto* p = static_cast<unsigned char*>(memory.allocateZeroed(25, 8));
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < 200; ++i) ASSERT_EQ(p[i], 0) << i;
  memory.release(p);
  EXPECT_EQ(memory.allocateZeroed(SIZE_MAX / 2, 4), nullptr);
}

TEST(Http2MemoryTest, ResizeKeepsTheBytesAsReallocDoes) {
  Http2Memory memory;
  void* p = memory.resize(nullptr, 10);  // null: an allocation
  ASSERT_NE(p, nullptr);
  memcpy(p, "0123456789", 10);
  void* same = memory.resize(p, 20);  // within its block: the same block
  EXPECT_EQ(same, p);
  void* grown = memory.resize(same, 3000);  // past the pooled sizes: copied into a large block
  ASSERT_NE(grown, nullptr);
  EXPECT_EQ(memcmp(grown, "0123456789", 10), 0);
  void* larger = memory.resize(grown, 70000);  // large to larger
  ASSERT_NE(larger, nullptr);
  EXPECT_EQ(memcmp(larger, "0123456789", 10), 0);
  EXPECT_EQ(memory.resize(larger, 0), nullptr);  // size 0: freed
}

TEST(Http2MemoryTest, ASessionRunsOnIt) {
  Http2Memory memory;
  nghttp2_session_callbacks* callbacks = nullptr;
  ASSERT_EQ(nghttp2_session_callbacks_new(&callbacks), 0);
  nghttp2_session* session = nullptr;
  ASSERT_EQ(nghttp2_session_client_new3(&session, callbacks, nullptr, nullptr, memory.mem()), 0);
  ASSERT_EQ(nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0), 0);
  auto field = [](const char* name, const char* value) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(value)), strlen(name),
                      strlen(value), NGHTTP2_NV_FLAG_NONE};
  };
  const nghttp2_nv headers[] = {field(":method", "GET"), field(":scheme", "http"),
                                field(":path", "/"), field(":authority", "localhost")};
  for (int i = 0; i < 50; ++i) {
    ASSERT_GT(nghttp2_submit_request(session, nullptr, headers, 4, nullptr, nullptr), 0);
  }
  size_t produced = 0;
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session, &data);
    ASSERT_GE(n, 0);
    if (n == 0) break;
    produced += static_cast<size_t>(n);
  }
  EXPECT_GT(produced, 50u * 9);  // a HEADERS frame each at least
  nghttp2_session_del(session);
  nghttp2_session_callbacks_del(callbacks);
}

}  // namespace
}  // namespace sidelock::http
