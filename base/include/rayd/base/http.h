#pragma once
// A small HTTP/1.1 server on the event loop, for what browsers and Prometheus read (the head's
// dashboard and every daemon's /metrics: GET and HEAD only) and for small key-value stores that
// clients write (Horovod's rendezvous: PUT and DELETE too, with a bounded body). One request
// per connection (`Connection: close`), bounded request size and time: enough for a page that
// polls once a second, a scraper or a rank's rendezvous, and nothing a peer can use to hold
// memory or connections.
//
// Threading: the loop's thread only.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rayd/base/event_loop.h"
#include "rayd/base/status.h"

namespace rayd::http {

struct Request {
  std::string method;  // GET or HEAD; PUT or DELETE on a server that takes writes
  std::string path;    // percent-decoded, without the query
  std::map<std::string, std::string> query;    // percent-decoded
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string peer;                            // host:port of the client
  std::string body;                            // as many bytes as Content-Length said

  // The value of cookie `name` in the Cookie header, or "".
  std::string Cookie(std::string_view name) const;
  // The header's value, or "".
  std::string Header(const std::string& lower_case_name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones

  static Response Text(int status, std::string body);
  static Response Json(int status, std::string body);
};

// The handler answers each request through `respond`, now or later (on the loop's thread).
using Respond = std::function<void(Response)>;
using Handler = std::function<void(const Request&, Respond)>;

// Whether the request proves `token`: as `Authorization: Bearer <token>` (scrapers, scripts)
// or as the value of cookie `cookie` (a browser). Compared in constant time.
bool CarriesToken(const Request& request, std::string_view cookie, std::string_view token);

// Parses the head of a request (request line and headers, up to and including the blank line).
// InvalidArgument names what is wrong; Unimplemented for methods other than GET and HEAD (and,
// with `writes`, PUT and DELETE).
Result<Request> ParseRequestHead(std::string_view head, bool writes = false);
// "%41b+c" -> "Ab c" (in queries '+' is a space). Malformed escapes are kept as they are.
std::string PercentDecode(std::string_view s, bool plus_is_space);

class HttpServer {
 public:
  static constexpr size_t kMaxRequestHead = 16 * 1024;
  static constexpr Millis kRequestTimeout{10000};

  struct Options {
    // A connection that has not sent its whole request within this gets 408 and is closed.
    Millis request_timeout = kRequestTimeout;
    // Non-zero: PUT and DELETE are served too, with a body (Content-Length; chunked bodies
    // are refused) of at most this many bytes; a larger one gets 413.
    size_t max_body = 0;
  };

  // `loop` must outlive the server.
  HttpServer(EventLoop& loop, Handler handler, Millis request_timeout = kRequestTimeout);
  HttpServer(EventLoop& loop, Handler handler, Options options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on host:port (port 0: any free one; see port()).
  Status Listen(const std::string& host, int port);
  int port() const { return port_; }
  // Stops listening and drops open connections.
  void Close();

 private:
  class Connection;
  static void OnNewConnection(uv_stream_t* listener, int status);

  EventLoop& loop_;
  Handler handler_;
  Options options_;
  uv_tcp_t* listener_ = nullptr;
  int port_ = 0;
  uint64_t next_id_ = 0;
  std::map<uint64_t, std::shared_ptr<Connection>> connections_;
};

}  // namespace rayd::http
