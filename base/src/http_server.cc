// HttpServer: one request per connection, answered by the handler, then closed.

#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>

#include "rayd/base/auth.h"
#include "rayd/base/http.h"
#include "rpc_internal.h"

namespace rayd::http {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 302: return "Found";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
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

bool CarriesToken(const Request& request, std::string_view cookie, std::string_view token) {
  if (ConstantTimeEquals(request.Cookie(cookie), token)) return true;
  const std::string authorization = request.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  return authorization.rfind(kBearer, 0) == 0 &&
         ConstantTimeEquals(std::string_view(authorization).substr(kBearer.size()), token);
}

// One accepted connection: reads the request head, asks the handler, writes, closes.
class HttpServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer& server, uint64_t id, uv_tcp_t* tcp)
      : server_(server), id_(id), tcp_(tcp), timer_(server.loop_) {}

  void Start() {
    tcp_->data = this;
    peer_ = rpc::PeerName(Stream());
    timer_.Start(server_.options_.request_timeout, Millis(0), [this] {
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
    if (!request_) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (buffer_.size() > kMaxRequestHead) Finish(Response::Text(431, "request too large\n"));
        return;
      }
      if (end + 4 > kMaxRequestHead) return Finish(Response::Text(431, "request too large\n"));
      auto request = ParseRequestHead(std::string_view(buffer_).substr(0, end + 4),
                                      /*writes=*/server_.options_.max_body > 0);
      if (!request.ok()) {
        const int status = request.status().code() == StatusCode::kUnimplemented ? 405 : 400;
        return Finish(Response::Text(status, request.status().message() + "\n"));
      }
      if (!request->Header("transfer-encoding").empty()) {
        return Finish(Response::Text(411, "send the body with a Content-Length\n"));
      }
      const std::string length = request->Header("content-length");
      body_size_ = 0;
      if (!length.empty()) {
        const auto [end_of_number, error] =
            std::from_chars(length.data(), length.data() + length.size(), body_size_);
        if (error != std::errc() || end_of_number != length.data() + length.size()) {
          return Finish(Response::Text(400, "malformed Content-Length\n"));
        }
      }
      if (body_size_ > server_.options_.max_body) {
        return Finish(Response::Text(
            413, "body larger than " + std::to_string(server_.options_.max_body) + " bytes\n"));
      }
      request->peer = peer_;
      request_ = std::move(request).value();
      buffer_.erase(0, end + 4);
    }
    if (buffer_.size() < body_size_) return;  // more of the body to come
    request_->body = buffer_.substr(0, body_size_);
    head_only_ = request_->method == "HEAD";
    answered_ = true;
    std::weak_ptr<Connection> weak = shared_from_this();
    server_.handler_(*request_, [weak](Response response) {
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
  std::optional<Request> request_;  // once its head has come
  size_t body_size_ = 0;            // its Content-Length
  std::string out_;
  uv_write_t write_{};
  std::shared_ptr<Connection> in_write_;  // set while write_ is in flight
  bool answered_ = false;
  bool writing_ = false;
  bool head_only_ = false;
};

HttpServer::HttpServer(EventLoop& loop, Handler handler, Millis request_timeout)
    : HttpServer(loop, std::move(handler), Options{.request_timeout = request_timeout}) {}

HttpServer::HttpServer(EventLoop& loop, Handler handler, Options options)
    : loop_(loop), handler_(std::move(handler)), options_(options) {}

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
