// base/http: request parsing, and the server against real sockets, including clients that send
// garbage, too much, too slowly, or vanish.

#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <thread>

#include "rayd/base/http.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using rayd::EventLoop;
using rayd::Millis;
using rayd::http::HttpServer;
using rayd::http::ParseRequestHead;
using rayd::http::Request;
using rayd::http::Response;
using rayd::testing::ConnectLoopback;

// An HttpServer on its own loop thread; the handler echoes what it parsed.
class EchoServer {
 public:
  explicit EchoServer(Millis timeout = HttpServer::kRequestTimeout)
      : EchoServer(HttpServer::Options{.request_timeout = timeout}) {}
  explicit EchoServer(HttpServer::Options options) {
    std::promise<int> port;
    thread_ = std::thread([&, options] {
      EventLoop loop;
      loop_ = &loop;
      HttpServer server(
          loop,
          [](const Request& r, rayd::http::Respond respond) {
            std::string body = r.method + " " + r.path;
            for (const auto& [k, v] : r.query) body += " " + k + "=" + v;
            body += " cookie=" + r.Cookie("c");
            if (!r.body.empty()) body += " body=" + r.body;
            respond(Response::Text(200, body));
          },
          options);
      REQUIRE(server.Listen("127.0.0.1", 0).ok());
      port.set_value(server.port());
      loop.Run();
      server.Close();
    });
    port_ = port.get_future().get();
  }
  ~EchoServer() {
    loop_->Stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::thread thread_;
  EventLoop* loop_ = nullptr;
  int port_ = 0;
};

// Sends `bytes` (in one write) and reads until the server closes.
std::string Exchange(int port, const std::string& bytes) {
  int fd = ConnectLoopback(port);
  REQUIRE(fd >= 0);
  if (!bytes.empty()) REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) >= 0);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("request heads parse: path, decoded query, lower-cased headers", "[http]") {
  auto r = ParseRequestHead(
      "GET /api/sweeps/a%20b?token=x%2By&q=1+2&flag HTTP/1.1\r\nHost: h\r\nCookie:  a=1; c=two "
      "\r\nX-Mixed-Case: v\r\n\r\n");
  REQUIRE(r.ok());
  CHECK(r->method == "GET");
  CHECK(r->path == "/api/sweeps/a b");
  CHECK(r->query == std::map<std::string, std::string>{{"token", "x+y"}, {"q", "1 2"}, {"flag", ""}});
  CHECK(r->Header("x-mixed-case") == "v");
  CHECK(r->Cookie("c") == "two");
  CHECK(r->Cookie("a") == "1");
  CHECK(r->Cookie("missing").empty());
  CHECK(rayd::http::PercentDecode("%zz%4", false) == "%zz%4");  // malformed escapes stay
}

TEST_CASE("malformed request heads are refused with the reason", "[http]") {
  CHECK(ParseRequestHead("GET /\r\n\r\n").status().message() == "malformed request line");
  CHECK(ParseRequestHead("GET http://x/ HTTP/1.1\r\n\r\n").status().message() ==
        "the request target must be a path");
  CHECK(ParseRequestHead("GET / HTTP/1.1\r\nno colon\r\n\r\n").status().message() ==
        "malformed header line");
  CHECK(ParseRequestHead("POST / HTTP/1.1\r\n\r\n").status().code() ==
        rayd::StatusCode::kUnimplemented);
}

TEST_CASE("the server answers, and survives garbage, floods, slow and vanishing clients",
          "[http]") {
  EchoServer server(300ms);
  const std::string ok = Exchange(server.port(), "GET /x?a=1 HTTP/1.1\r\nCookie: c=k\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("Content-Length: 19\r\n") != std::string::npos);
  CHECK(ok.substr(ok.find("\r\n\r\n") + 4) == "GET /x a=1 cookie=k");
  // HEAD: the headers of GET, no body.
  const std::string head = Exchange(server.port(), "HEAD /x HTTP/1.1\r\n\r\n");
  CHECK(head.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(head.substr(head.find("\r\n\r\n") + 4).empty());

  CHECK(Exchange(server.port(), "\x16\x03\x01 garbage\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(Exchange(server.port(), "DELETE / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
  // A head that never ends is cut off at the limit, not buffered.
  const std::string flood = "GET / HTTP/1.1\r\nX: " + std::string(HttpServer::kMaxRequestHead, 'a');
  CHECK(Exchange(server.port(), flood).rfind("HTTP/1.1 431", 0) == 0);
  // A client that sends half a request and waits is closed at the timeout.
  CHECK(Exchange(server.port(), "GET / HTTP/1.1\r\n").rfind("HTTP/1.1 408", 0) == 0);
  // Clients that connect and vanish cost nothing.
  for (int i = 0; i < 50; ++i) {
    int fd = ConnectLoopback(server.port());
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  CHECK(Exchange(server.port(), "GET /still HTTP/1.1\r\n\r\n").find("GET /still") !=
        std::string::npos);
}

TEST_CASE("a server that takes writes reads PUT and DELETE bodies, bounded", "[http]") {
  EchoServer server(HttpServer::Options{.request_timeout = 300ms, .max_body = 16});
  auto body = [](const std::string& reply) { return reply.substr(reply.find("\r\n\r\n") + 4); };
  CHECK(body(Exchange(server.port(),
                      "PUT /global/rank_0 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhost1")) ==
        "PUT /global/rank_0 cookie= body=host1");
  CHECK(body(Exchange(server.port(), "DELETE /global/0 HTTP/1.1\r\n\r\n")) ==
        "DELETE /global/0 cookie=");
  // The body may come in pieces, after the head.
  int fd = ConnectLoopback(server.port());
  REQUIRE(fd >= 0);
  const std::string head = "PUT /s/k HTTP/1.1\r\nContent-Length: 6\r\n\r\nab";
  REQUIRE(::send(fd, head.data(), head.size(), MSG_NOSIGNAL) > 0);
  std::this_thread::yield();
  REQUIRE(::send(fd, "cdef", 4, MSG_NOSIGNAL) == 4);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  CHECK(body(out) == "PUT /s/k cookie= body=abcdef");

  CHECK(Exchange(server.port(), "PUT /s/k HTTP/1.1\r\nContent-Length: 17\r\n\r\n")
            .rfind("HTTP/1.1 413", 0) == 0);
  CHECK(Exchange(server.port(), "PUT /s/k HTTP/1.1\r\nContent-Length: 3x\r\n\r\n")
            .rfind("HTTP/1.1 400", 0) == 0);
  CHECK(Exchange(server.port(), "PUT /s/k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
            .rfind("HTTP/1.1 411", 0) == 0);
  // A body that never comes whole is cut off at the timeout.
  CHECK(Exchange(server.port(), "PUT /s/k HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc")
            .rfind("HTTP/1.1 408", 0) == 0);
  CHECK(Exchange(server.port(), "POST /s/k HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
}
