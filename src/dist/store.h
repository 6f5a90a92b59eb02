// A key-value store over TCP for the ranks of one job, as PyTorch's c10d TCPStore: rank 0 serves it
// from a thread of its own, every rank (rank 0 too) is a client. It carries no training data: Gloo
// finds its peers through it (rendezvous), and a rank whose collective timed out asks it which
// ranks are stuck in the same collective (Note [timeouts] in process_group.cpp).
//
// The protocol: a request is a one-byte command, then length-prefixed (uint32, little endian)
// key and value; SET stores, GET answers the value or waits for the key, CHECK answers whether all
// listed keys exist, ADD adds an int64 to a counter and answers the sum.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ember::dist::detail {

class TcpStore {
 public:
  // is_server: listen on `port` of every interface (0 picks a free port; port() tells which) and
  // serve, then connect to it as a client. Otherwise connect to host:port, retrying until `timeout`.
  TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  int port() const { return port_; }

  void set(const std::string& key, const std::vector<char>& value);
  // The value of `key`, waiting for it to be set until `timeout` (then an ember::Error naming it).
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  // Whether every key is set now.
  bool check(const std::vector<std::string>& keys);
  // Waits until every key is set; false when `timeout` passes first.
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Adds delta to the counter `key` (0 when unset) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);

 private:
  struct Server;
  std::unique_ptr<Server> server_;  // rank 0 only
  int port_ = 0;
  int socket_ = -1;  // this client's connection
  std::chrono::milliseconds timeout_;
};

}  // namespace ember::dist::detail
