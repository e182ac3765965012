// RedisValue literals for tests that decode replies without a server.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "redis/resp.h"

namespace sidelock::backend {

inline RedisValue integer(int64_t i) {
  RedisValue v;
  v.type = RedisValue::Type::kInteger;
  v.integer = i;
  return v;
}
inline RedisValue str(std::string s) {
  RedisValue v;
  v.type = RedisValue::Type::kString;
  v.str = std::move(s);
  return v;
}
inline RedisValue array(std::vector<RedisValue> e) {
  RedisValue v;
  v.type = RedisValue::Type::kArray;
  v.elements = std::move(e);
  return v;
}
inline RedisValue error(std::string s) {
  RedisValue v;
  v.type = RedisValue::Type::kError;
  v.str = std::move(s);
  return v;
}

}  // namespace sidelock::backend
