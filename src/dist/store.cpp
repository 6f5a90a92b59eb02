// TcpStore (store.h): a poll() loop on rank 0 serves every connection without ever blocking on one
// of them (non-blocking sockets, per-connection input and output buffers); clients use blocking
// sockets and bound every wait with poll(). A GET carries its timeout: the server answers "not found"
// at the deadline, so a GET that timed out leaves the connection in step with the server.
//
// Numbers (a GET's timeout in milliseconds, an ADD's delta, a counter's value) travel in the value
// field and are stored as decimal text, so that get() on a counter reads as the number; CHECK's keys
// travel in the value field, each length-prefixed. An answer is a status byte and a length-prefixed
// value. wait() is a GET per key. A connection that sends a malformed request is closed.
#include "dist/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>

#include "ember/error.h"

namespace ember::dist::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum class Command : uint8_t { kSet, kGet, kCheck, kAdd };
enum class Status : uint8_t { kOk, kNotFound, kInvalid };

constexpr uint32_t kMaxFieldBytes = 256u << 20;  // a longer key or value is a broken peer
constexpr milliseconds kConnectRetry(50);
constexpr milliseconds kMaxWait(int64_t{1} << 40);  // 35 years: longer waits are clamped (no clock overflow)

milliseconds bounded(milliseconds wait) { return std::clamp(wait, milliseconds(0), kMaxWait); }

double seconds(milliseconds duration) { return static_cast<double>(duration.count()) / 1000; }

int millis_until(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

void append_u32(std::vector<char>& out, uint32_t value) {
  for (int byte = 0; byte < 4; ++byte) out.push_back(static_cast<char>((value >> (8 * byte)) & 0xff));
}

uint32_t read_u32(const char* data) {
  uint32_t value = 0;
  for (int byte = 0; byte < 4; ++byte) value |= uint32_t{static_cast<uint8_t>(data[byte])} << (8 * byte);
  return value;
}

void append_field(std::vector<char>& out, std::string_view field) {
  append_u32(out, static_cast<uint32_t>(field.size()));
  out.insert(out.end(), field.begin(), field.end());
}

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

void set_no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_blocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

// "ip:port" of the store this client socket talks to ("port N" once the connection was reset).
std::string store_address(int fd, int port) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  char ip[INET_ADDRSTRLEN] = {};
  if (fd >= 0 && getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0 &&
      inet_ntop(AF_INET, &address.sin_addr, ip, sizeof(ip)) != nullptr) {
    return ember::detail::concat(ip, ":", port);
  }
  return ember::detail::concat("port ", port);
}

// One connect attempt bounded by `deadline`; the socket, or -1 with errno set.
int try_connect(const addrinfo& info, Clock::time_point deadline) {
  const int fd = socket(info.ai_family, info.ai_socktype | SOCK_CLOEXEC, info.ai_protocol);
  if (fd < 0) return -1;
  set_blocking(fd, false);
  int error = connect(fd, info.ai_addr, info.ai_addrlen) == 0 ? 0 : errno;
  if (error == EINPROGRESS) {
    pollfd entry{fd, POLLOUT, 0};
    socklen_t length = sizeof(error);
    error = poll(&entry, 1, millis_until(deadline)) != 1                 ? ETIMEDOUT
            : getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 ? errno
                                                                         : error;
  }
  if (error == 0) {
    // On loopback a connect to a free port in the ephemeral range can connect the socket to itself.
    sockaddr_in local{}, peer{};
    socklen_t local_length = sizeof(local), peer_length = sizeof(peer);
    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length);
    getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length);
    if (local.sin_port == peer.sin_port && local.sin_addr.s_addr == peer.sin_addr.s_addr) error = ECONNREFUSED;
  }
  if (error != 0) {
    close(fd);
    errno = error;
    return -1;
  }
  set_blocking(fd, true);
  set_no_delay(fd);
  return fd;
}

int connect_to_store(const std::string& host, int port, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + bounded(timeout);
  const std::string service = std::to_string(port);
  std::string last_error;
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* infos = nullptr;
    const int resolved = getaddrinfo(host.c_str(), service.c_str(), &hints, &infos);
    if (resolved != 0) last_error = gai_strerror(resolved);
    for (addrinfo* info = infos; info != nullptr; info = info->ai_next) {
      const int fd = try_connect(*info, deadline);
      if (fd >= 0) {
        freeaddrinfo(infos);
        return fd;
      }
      last_error = std::strerror(errno);
    }
    if (infos != nullptr) freeaddrinfo(infos);
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(kConnectRetry, deadline - now));
  }
  EMBER_FAIL("[dist] could not connect to the store at ", host, ":", port, " within ", seconds(timeout),
             " s (is rank 0 running? EMBER_MASTER_ADDR/EMBER_MASTER_PORT): ", last_error);
}

struct Answer {
  Status status;
  std::vector<char> value;
};

// Sends one request on the client socket `fd` and reads its answer, waiting until `deadline`. A
// broken or silent connection is closed (fd = -1: the stream is out of step) and reported.
Answer request(int& fd, int port, Command command, std::string_view key, std::string_view value,
               Clock::time_point deadline) {
  EMBER_CHECK(fd >= 0, "[dist] the connection to the store (port ", port, ") was closed after an earlier error");
  const std::string address = store_address(fd, port);  // now, while the connection still has a peer
  const auto fail = [&](const char* what) {
    close(fd);
    fd = -1;
    EMBER_FAIL("[dist] the store at ", address, " ", what);
  };
  // Waits until fd is ready for `events`; false when the deadline passed.
  const auto ready = [&](short events) {
    pollfd entry{fd, events, 0};
    int result;
    while ((result = poll(&entry, 1, millis_until(deadline))) < 0 && errno == EINTR) {
    }
    return result == 1;
  };

  std::vector<char> message{static_cast<char>(command)};
  append_field(message, key);
  append_field(message, value);
  for (size_t sent = 0; sent < message.size();) {
    if (!ready(POLLOUT)) fail("did not take a request in time");
    const ssize_t n = send(fd, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR && errno != EAGAIN) fail("closed the connection (did rank 0 exit?)");
    if (n > 0) sent += static_cast<size_t>(n);
  }
  const auto receive = [&](char* data, size_t size) {
    for (size_t received = 0; received < size;) {
      if (!ready(POLLIN)) fail("did not answer in time");
      const ssize_t n = recv(fd, data + received, size - received, 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) fail("closed the connection (did rank 0 exit?)");
      if (n > 0) received += static_cast<size_t>(n);
    }
  };
  char header[5];
  receive(header, sizeof(header));
  Answer answer{static_cast<Status>(header[0]), std::vector<char>(read_u32(header + 1))};
  receive(answer.value.data(), answer.value.size());
  return answer;
}

}  // namespace

// --- the server -------------------------------------------------------------------------------------

struct TcpStore::Server {
  struct Connection {
    std::vector<char> input;                 // bytes received, not yet a whole request
    std::vector<char> output;                // answers not yet sent
    std::optional<std::string> waiting_for;  // a GET's key, until it is set or its deadline
    Clock::time_point deadline;
  };

  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};  // the destructor writes to [1] to stop the loop
  std::unordered_map<int, Connection> connections;
  std::unordered_map<std::string, std::vector<char>> data;
  std::thread thread;

  explicit Server(int port) {
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    EMBER_CHECK(listen_fd >= 0, "[dist] could not create the store's socket: ", std::strerror(errno));
    const int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(listen_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      const int error = errno;
      close(listen_fd);
      EMBER_CHECK(error != EADDRINUSE, "[dist] port ", port,
                  " is already in use: another job, or a previous one still closing (set EMBER_MASTER_PORT to a "
                  "free port)");
      EMBER_FAIL("[dist] could not listen on port ", port, ": ", std::strerror(error));
    }
    if (listen(listen_fd, SOMAXCONN) != 0 || pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      const int error = errno;
      close(listen_fd);
      EMBER_FAIL("[dist] could not listen on port ", port, ": ", std::strerror(error));
    }
    thread = std::thread([this] { serve(); });
  }

  ~Server() {
    const char byte = 0;
    while (write(wake_pipe[1], &byte, 1) < 0 && errno == EINTR) {
    }
    thread.join();
    for (const auto& [fd, connection] : connections) close(fd);
    close(listen_fd);
    close(wake_pipe[0]);
    close(wake_pipe[1]);
  }

  int port() const {
    sockaddr_in address{};
    socklen_t length = sizeof(address);
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&address), &length);
    return ntohs(address.sin_port);
  }

  void serve() {
    std::vector<pollfd> entries;
    while (true) {
      entries = {{wake_pipe[0], POLLIN, 0}, {listen_fd, POLLIN, 0}};
      std::optional<Clock::time_point> next_deadline;
      for (const auto& [fd, connection] : connections) {
        // A client that does not read its answers is not read from either (TCP holds it back).
        entries.push_back({fd, static_cast<short>(connection.output.empty() ? POLLIN : POLLOUT), 0});
        if (connection.waiting_for && (!next_deadline || connection.deadline < *next_deadline)) {
          next_deadline = connection.deadline;
        }
      }
      if (poll(entries.data(), entries.size(), next_deadline ? millis_until(*next_deadline) : -1) < 0) continue;
      if (entries[0].revents != 0) return;
      if (entries[1].revents != 0) accept_all();

      for (size_t i = 2; i < entries.size(); ++i) {
        if (entries[i].revents != 0 && !service(entries[i].fd)) {
          close(entries[i].fd);
          connections.erase(entries[i].fd);
        }
      }
      for (auto& [fd, connection] : connections) {
        if (connection.waiting_for && Clock::now() >= connection.deadline) answer(fd, Status::kNotFound, {});
      }
    }
  }

  // Sends, reads and handles what it can for a connection poll() reported; false to close it.
  bool service(int fd) {
    if (!flush(fd)) return false;
    if (!connections[fd].output.empty()) return true;
    const bool open = receive(fd);  // requests sent before a close are still answered
    return handle_requests(fd) && open;
  }

  void accept_all() {
    int fd;
    while ((fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
      set_no_delay(fd);
      connections[fd];
    }
  }

  // Reads what fd has; false when the peer closed or broke the connection.
  bool receive(int fd) {
    std::vector<char>& input = connections[fd].input;
    char buffer[65536];
    while (true) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n > 0) {
        input.insert(input.end(), buffer, buffer + n);
      } else if (n == 0) {
        return false;
      } else {
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      }
    }
  }

  // Sends what fits of fd's pending answers; false when the connection broke.
  bool flush(int fd) {
    std::vector<char>& output = connections[fd].output;
    size_t sent = 0;
    while (sent < output.size()) {
      const ssize_t n = send(fd, output.data() + sent, output.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EINTR) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
        break;
      }
      if (n > 0) sent += static_cast<size_t>(n);
    }
    output.erase(output.begin(), output.begin() + static_cast<std::ptrdiff_t>(sent));
    return true;
  }

  void answer(int fd, Status status, std::string_view value) {
    Connection& connection = connections[fd];
    connection.waiting_for.reset();
    connection.output.push_back(static_cast<char>(status));
    append_field(connection.output, value);
    flush(fd);  // an error shows again at the next poll
  }

  // Handles the whole requests in fd's input, in order, while their answers go out at once (a
  // waiting GET or an unsent answer holds back the rest); false when a request is malformed.
  bool handle_requests(int fd) {
    Connection& connection = connections[fd];
    size_t used = 0;
    while (!connection.waiting_for && connection.output.empty()) {
      const char* begin = connection.input.data() + used;
      const size_t size = connection.input.size() - used;
      if (size < 5) break;
      const auto command = static_cast<uint8_t>(begin[0]);
      const uint32_t key_size = read_u32(begin + 1);
      if (command > static_cast<uint8_t>(Command::kAdd) || key_size > kMaxFieldBytes) return false;
      if (size < 9 + size_t{key_size}) break;
      const uint32_t value_size = read_u32(begin + 5 + key_size);
      if (value_size > kMaxFieldBytes) return false;
      if (size < 9 + size_t{key_size} + value_size) break;
      const std::string key(begin + 5, key_size);
      const std::string_view value(begin + 9 + key_size, value_size);
      if (!handle(fd, static_cast<Command>(command), key, value)) return false;
      used += 9 + size_t{key_size} + value_size;
    }
    connection.input.erase(connection.input.begin(), connection.input.begin() + static_cast<std::ptrdiff_t>(used));
    return true;
  }

  bool handle(int fd, Command command, const std::string& key, std::string_view value) {
    switch (command) {
      case Command::kSet:
        store(key, value);
        answer(fd, Status::kOk, {});
        return true;
      case Command::kGet: {
        const std::optional<int64_t> timeout_ms = parse_int(value);
        if (!timeout_ms) return false;
        if (const auto found = data.find(key); found != data.end()) {
          answer(fd, Status::kOk, {found->second.data(), found->second.size()});
        } else {
          connections[fd].waiting_for = key;
          connections[fd].deadline = Clock::now() + bounded(milliseconds(*timeout_ms));
        }
        return true;
      }
      case Command::kCheck: {  // value: the keys, each length-prefixed
        bool all_set = true;
        for (size_t at = 0; at < value.size();) {
          if (value.size() - at < 4 || value.size() - at - 4 < read_u32(value.data() + at)) return false;
          const size_t size = read_u32(value.data() + at);
          all_set = all_set && data.count(std::string(value.substr(at + 4, size))) != 0;
          at += 4 + size;
        }
        answer(fd, all_set ? Status::kOk : Status::kNotFound, {});
        return true;
      }
      case Command::kAdd: {
        const std::optional<int64_t> delta = parse_int(value);
        if (!delta) return false;
        const auto found = data.find(key);
        const std::optional<int64_t> old =
            found == data.end() ? 0 : parse_int({found->second.data(), found->second.size()});
        if (!old) {
          answer(fd, Status::kInvalid, {});
        } else {
          const std::string sum = std::to_string(*old + *delta);
          store(key, sum);
          answer(fd, Status::kOk, sum);
        }
        return true;
      }
    }
    return false;
  }

  // Stores key and answers every GET that waits for it.
  void store(const std::string& key, std::string_view value) {
    data[key].assign(value.begin(), value.end());
    for (auto& [fd, connection] : connections) {
      if (connection.waiting_for == key) answer(fd, Status::kOk, value);
    }
  }
};

// --- the client -------------------------------------------------------------------------------------

TcpStore::TcpStore(const std::string& host, int port, bool is_server, milliseconds timeout)
    : timeout_(bounded(timeout)) {
  EMBER_CHECK(port >= 0 && port <= 65535, "[dist] the store's port must be in [0, 65535], got ", port);
  if (is_server) {
    server_ = std::make_unique<Server>(port);
    port_ = server_->port();
    socket_ = connect_to_store("127.0.0.1", port_, timeout);
  } else {
    EMBER_CHECK(port != 0, "[dist] a client of the store needs its port, got 0");
    port_ = port;
    socket_ = connect_to_store(host, port, timeout);
  }
}

TcpStore::~TcpStore() {
  if (socket_ >= 0) close(socket_);
  server_.reset();
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  request(socket_, port_, Command::kSet, key, {value.data(), value.size()}, Clock::now() + timeout_);
}

std::vector<char> TcpStore::get(const std::string& key, milliseconds timeout) {
  timeout = bounded(timeout);
  const std::string timeout_ms = std::to_string(timeout.count());
  // The server answers by the GET's own deadline; timeout_ more is for it to be heard.
  Answer answer = request(socket_, port_, Command::kGet, key, timeout_ms, Clock::now() + timeout + timeout_);
  EMBER_CHECK(answer.status == Status::kOk, "[dist] key '", key, "' was not set within ", seconds(timeout), " s");
  return std::move(answer.value);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::vector<char> listed;
  for (const std::string& key : keys) append_field(listed, key);
  const Answer answer =
      request(socket_, port_, Command::kCheck, {}, {listed.data(), listed.size()}, Clock::now() + timeout_);
  return answer.status == Status::kOk;
}

bool TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + bounded(timeout);
  for (const std::string& key : keys) {
    const std::string timeout_ms = std::to_string(millis_until(deadline));
    if (request(socket_, port_, Command::kGet, key, timeout_ms, deadline + timeout_).status != Status::kOk) {
      return false;
    }
  }
  return true;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  const Answer answer = request(socket_, port_, Command::kAdd, key, std::to_string(delta), Clock::now() + timeout_);
  EMBER_CHECK(answer.status == Status::kOk, "[dist] the store's key '", key, "' does not hold a counter");
  return parse_int({answer.value.data(), answer.value.size()}).value_or(0);
}

}  // namespace ember::dist::detail
