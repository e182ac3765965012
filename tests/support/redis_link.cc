#include "support/redis_link.h"

#include <hiredis/hiredis.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace sidelock::testing {

RedisLink::RedisLink(const std::string& host, int port, int command_timeout_ms) {
  const timeval timeout{5, 0};
  ctx_ = redisConnectWithTimeout(host.c_str(), port, timeout);
  if (ctx_ == nullptr || ctx_->err != 0) {
    const std::string why = ctx_ != nullptr ? ctx_->errstr : "out of memory";
    redisFree(ctx_);
    throw std::runtime_error("connect to redis " + host + ":" + std::to_string(port) + ": " + why);
  }
  if (command_timeout_ms > 0) {
    redisSetTimeout(ctx_, {command_timeout_ms / 1000, (command_timeout_ms % 1000) * 1000});
  } else {
    redisSetTimeout(ctx_, {0, 0});  // the connect timeout would otherwise stay on
  }
}

RedisLink::~RedisLink() { redisFree(ctx_); }

namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};

std::unique_ptr<redisReply, ReplyDeleter> send(redisContext* ctx,
                                               const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(ctx, static_cast<int>(args.size()), argv.data(), lens.data()));
  if (reply == nullptr) throw std::runtime_error(std::string("redis: ") + ctx->errstr);
  return std::unique_ptr<redisReply, ReplyDeleter>(reply);
}

std::unique_ptr<redisReply, ReplyDeleter> run(redisContext* ctx,
                                              const std::vector<std::string>& args) {
  auto reply = send(ctx, args);
  if (reply->type == REDIS_REPLY_ERROR)
    throw std::runtime_error("redis: " + std::string(reply->str));
  return reply;
}

// redis-cli's raw output format (hiredis 0.14 speaks RESP2 only: no maps, sets or pushes).
void appendRawReply(const redisReply* r, std::string& out) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out.append(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:  // redis-cli ends an error with a newline, inside an array too
      out.append(r->str, r->len);
      out += '\n';
      break;
    case REDIS_REPLY_INTEGER:
      out += std::to_string(r->integer);
      break;
    case REDIS_REPLY_ARRAY:
      for (size_t i = 0; i < r->elements; ++i) {
        if (i > 0) out += '\n';
        appendRawReply(r->element[i], out);
      }
      break;
    default:  // REDIS_REPLY_NIL
      break;
  }
}

void appendNumbers(const redisReply* r, std::vector<int64_t>& out) {
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.push_back(r->integer);
      break;
    case REDIS_REPLY_STRING: {
      const std::string text(r->str, r->len);
      char* end = nullptr;
      const long long n = std::strtoll(text.c_str(), &end, 10);
      if (!text.empty() && *end == '\0') out.push_back(n);  // other strings are not numbers
      break;
    }
    case REDIS_REPLY_ARRAY:
      for (size_t i = 0; i < r->elements; ++i) appendNumbers(r->element[i], out);
      break;
    default:
      break;
  }
}

}  // namespace

std::vector<int64_t> RedisLink::command(const std::vector<std::string>& args) {
  auto reply = run(ctx_, args);
  std::vector<int64_t> numbers;
  appendNumbers(reply.get(), numbers);
  return numbers;
}

std::string RedisLink::output(const std::vector<std::string>& args) {
  auto reply = send(ctx_, args);
  std::string out;
  appendRawReply(reply.get(), out);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string RedisLink::text(const std::vector<std::string>& args) {
  auto reply = run(ctx_, args);
  if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS) {
    return std::string(reply->str, reply->len);
  }
  return "";
}

}  // namespace sidelock::testing
