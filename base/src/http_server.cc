// HttpServer: one request per connection, answered by the handler, then closed.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "rayd/base/auth.h"
#include "rayd/base/http.h"
#include "rpc_internal.h"

namespace rayd::http {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 302: return "Found";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

std::string Serialize(const Response& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + Reason(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "Connection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n";
  for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
  out += "\r\n";
  if (!head_only) out += r.body;
  return out;
}

}  // namespace

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexDigit(s[i + 1]);
      const int lo = HexDigit(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && s[i] == '+' ? ' ' : s[i]);
  }
  return out;
}

std::string Request::Header(const std::string& lower_case_name) const {
  auto it = headers.find(lower_case_name);
  return it == headers.end() ? "" : it->second;
}

std::string Request::Cookie(std::string_view name) const {
  const std::string header = Header("cookie");
  std::string_view rest = header;
  while (!rest.empty()) {
    const size_t end = std::min(rest.find(';'), rest.size());
    std::string_view pair = Trim(rest.substr(0, end));
    rest.remove_prefix(std::min(end + 1, rest.size()));
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
      return std::string(pair.substr(eq + 1));
    }
  }
  return "";
}

bool CarriesToken(const Request& request, std::string_view cookie, std::string_view token) {
  if (ConstantTimeEquals(request.Cookie(cookie), token)) return true;
  const std::string authorization = request.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  return authorization.rfind(kBearer, 0) == 0 &&
         ConstantTimeEquals(std::string_view(authorization).substr(kBearer.size()), token);
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

Result<Request> ParseRequestHead(std::string_view head) {
  const size_t line_end = head.find("\r\n");
  if (line_end == std::string_view::npos) return Status::InvalidArgument("no request line");
  const std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    return Status::InvalidArgument("malformed request line");
  }
  Request request;
  request.method = std::string(line.substr(0, sp1));
  if (request.method != "GET" && request.method != "HEAD") {
    return Status::Unimplemented("method " + request.method + " is not served here");
  }
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (target.empty() || target.front() != '/') {
    return Status::InvalidArgument("the request target must be a path");
  }
  const size_t q = target.find('?');
  request.path = PercentDecode(target.substr(0, q), /*plus_is_space=*/false);
  if (q != std::string_view::npos) {
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
      const size_t amp = std::min(query.find('&'), query.size());
      std::string_view pair = query.substr(0, amp);
      query.remove_prefix(std::min(amp + 1, query.size()));
      if (pair.empty()) continue;
      const size_t eq = pair.find('=');
      request.query[PercentDecode(pair.substr(0, eq), true)] =
          eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1), true);
    }
  }
  std::string_view rest = head.substr(line_end + 2);
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    if (end == std::string_view::npos) return Status::InvalidArgument("unterminated header");
    const std::string_view header = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    if (header.empty()) break;
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Status::InvalidArgument("malformed header line");
    }
    request.headers[Lower(Trim(header.substr(0, colon)))] =
        std::string(Trim(header.substr(colon + 1)));
  }
  return request;
}

// One accepted connection: reads the request head, asks the handler, writes, closes.
class HttpServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer& server, uint64_t id, uv_tcp_t* tcp)
      : server_(server), id_(id), tcp_(tcp), timer_(server.loop_) {}

  void Start() {
    tcp_->data = this;
    peer_ = rpc::PeerName(Stream());
    timer_.Start(server_.request_timeout_, Millis(0), [this] {
      auto keep = shared_from_this();  // a failed write drops the connection (and this timer)
      Finish(Response::Text(408, "too slow\n"));
    });
    uv_read_start(
        Stream(),
        [](uv_handle_t*, size_t suggested, uv_buf_t* buf) {
          buf->base = new char[suggested];
          buf->len = suggested;
        },
        [](uv_stream_t* stream, ssize_t n, const uv_buf_t* buf) {
          auto* self = static_cast<Connection*>(stream->data);
          if (n > 0) self->OnData(std::string_view(buf->base, static_cast<size_t>(n)));
          delete[] buf->base;
          if (n < 0) self->Drop();
        });
  }

  // Closes the socket at once (peer gone, server closing).
  void Drop() {
    if (tcp_ == nullptr) return;
    timer_.Stop();
    uv_read_stop(Stream());
    rpc::CloseAndFree(Stream());
    tcp_ = nullptr;
    server_.connections_.erase(id_);  // may destroy this
  }

 private:
  uv_stream_t* Stream() { return reinterpret_cast<uv_stream_t*>(tcp_); }

  void OnData(std::string_view data) {
    if (answered_) return;
    buffer_.append(data);
    const size_t end = buffer_.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (buffer_.size() > kMaxRequestHead) Finish(Response::Text(431, "request too large\n"));
      return;
    }
    if (end + 4 > kMaxRequestHead) return Finish(Response::Text(431, "request too large\n"));
    auto request = ParseRequestHead(std::string_view(buffer_).substr(0, end + 4));
    if (!request.ok()) {
      const int status = request.status().code() == StatusCode::kUnimplemented ? 405 : 400;
      return Finish(Response::Text(status, request.status().message() + "\n"));
    }
    request->peer = peer_;
    head_only_ = request->method == "HEAD";
    answered_ = true;
    std::weak_ptr<Connection> weak = shared_from_this();
    server_.handler_(*request, [weak](Response response) {
      if (auto self = weak.lock()) self->Write(std::move(response));
    });
  }

  void Finish(Response response) {
    answered_ = true;
    Write(std::move(response));
  }

  void Write(Response response) {
    if (tcp_ == nullptr || writing_) return;
    writing_ = true;
    timer_.Stop();
    uv_read_stop(Stream());
    out_ = Serialize(response, head_only_);
    uv_buf_t buf = uv_buf_init(out_.data(), static_cast<unsigned>(out_.size()));
    write_.data = this;
    // The write request lives in this object: keep it until libuv is done with it, even if
    // the server drops the connection meanwhile (its callback then comes with ECANCELED).
    in_write_ = shared_from_this();
    const int rc = uv_write(&write_, Stream(), &buf, 1, [](uv_write_t* req, int) {
      auto* self = static_cast<Connection*>(req->data);
      std::shared_ptr<Connection> keep = std::move(self->in_write_);
      self->Drop();
    });
    if (rc != 0) {
      in_write_.reset();
      Drop();
    }
  }

  HttpServer& server_;
  const uint64_t id_;
  uv_tcp_t* tcp_;
  Timer timer_;
  std::string peer_;
  std::string buffer_;
  std::string out_;
  uv_write_t write_{};
  std::shared_ptr<Connection> in_write_;  // set while write_ is in flight
  bool answered_ = false;
  bool writing_ = false;
  bool head_only_ = false;
};

HttpServer::HttpServer(EventLoop& loop, Handler handler, Millis request_timeout)
    : loop_(loop), handler_(std::move(handler)), request_timeout_(request_timeout) {}

HttpServer::~HttpServer() { Close(); }

Status HttpServer::Listen(const std::string& host, int port) {
  rpc::Endpoint ep;
  ep.kind = rpc::Endpoint::Kind::kTcp;
  ep.host = host;
  ep.port = port;
  RAYD_ASSIGN_OR_RETURN(sockaddr_storage addr, rpc::ResolveTcp(ep));
  auto* tcp = new uv_tcp_t;
  uv_tcp_init(loop_.uv(), tcp);
  int rc = uv_tcp_bind(tcp, reinterpret_cast<const sockaddr*>(&addr), 0);
  if (rc == 0) rc = uv_listen(reinterpret_cast<uv_stream_t*>(tcp), 128, &OnNewConnection);
  if (rc != 0) {
    rpc::CloseAndFree(reinterpret_cast<uv_stream_t*>(tcp));
    const std::string where = host + ":" + std::to_string(port);
    if (rc == UV_EADDRINUSE) return Status::AlreadyExists(where + " is already in use");
    return Status::Unavailable("cannot listen on " + where + ": " + uv_strerror(rc));
  }
  sockaddr_storage bound{};
  int len = sizeof(bound);
  uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  tcp->data = this;
  listener_ = tcp;
  return Status::Ok();
}

void HttpServer::OnNewConnection(uv_stream_t* listener, int status) {
  auto* self = static_cast<HttpServer*>(listener->data);
  if (status != 0) {
    spdlog::warn("http accept failed: {}", uv_strerror(status));
    return;
  }
  auto* tcp = new uv_tcp_t;
  uv_tcp_init(self->loop_.uv(), tcp);
  if (uv_accept(listener, reinterpret_cast<uv_stream_t*>(tcp)) != 0) {
    rpc::CloseAndFree(reinterpret_cast<uv_stream_t*>(tcp));
    return;
  }
  const uint64_t id = self->next_id_++;
  auto connection = std::make_shared<Connection>(*self, id, tcp);
  self->connections_.emplace(id, connection);
  connection->Start();
}

void HttpServer::Close() {
  if (listener_ != nullptr) {
    rpc::CloseAndFree(reinterpret_cast<uv_stream_t*>(listener_));
    listener_ = nullptr;
  }
  auto connections = std::move(connections_);
  connections_.clear();
  for (auto& [id, connection] : connections) connection->Drop();
}

}  // namespace rayd::http
