// Horovod's launcher contract without a cluster: each rank's place (local and cross ranks on
// even, uneven and interleaved placements), the environment of the horovod launcher, and the
// HTTP rendezvous against Horovod's protocol (PUT, GET, 404, DELETE, a scope emptied once all
// its ranks are done with it), over real sockets, refusing peers outside the gang.

#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "launch/command_rank.h"
#include "launch/horovod_rendezvous.h"
#include "launch/launcher_env.h"
#include "test_util.h"

namespace rayd::train::internal {
namespace {

using Catch::Matchers::Contains;
using rayd::testing::ConnectLoopback;

std::vector<std::string> Endpoints(const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (size_t i = 0; i < hosts.size(); ++i)
    out.push_back(hosts[i] + ":" + std::to_string(29500 + i));
  return out;
}

http::Request Call(const std::string& method, const std::string& path, std::string body = "") {
  http::Request request;
  request.method = method;
  request.path = path;
  request.body = std::move(body);
  return request;
}

// One request over a real connection; returns "<status> <body>".
std::string Exchange(int port, const std::string& method, const std::string& path,
                     const std::string& body = "") {
  const int fd = ConnectLoopback(port);
  REQUIRE(fd >= 0);
  const std::string request = method + " " + path +
                              " HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\n\r\n" + body;
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) > 0);
  std::string reply;
  char buf[1024];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (reply.size() < 12) return "no answer";
  return reply.substr(9, 3) + " " + reply.substr(reply.find("\r\n\r\n") + 4);
}

}  // namespace

TEST_CASE("horovod places: local ranks per node, cross ranks among the nodes holding each",
          "[train][horovod]") {
  // Two nodes of two ranks: local 0,1 on each; cross 0 on the first node, 1 on the second.
  auto even =
      HorovodLayout({0, 0, 1, 1}, Endpoints({"10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"}));
  REQUIRE(even.size() == 4);
  CHECK(even[2].hostname == "10.0.0.2");
  CHECK(even[2].local_rank == 0);
  CHECK(even[2].local_size == 2);
  CHECK(even[2].cross_rank == 1);
  CHECK(even[2].cross_size == 2);
  CHECK(even[1].cross_rank == 0);

  // Uneven and interleaved: node 0 holds ranks 0 and 2 and 3, node 1 holds rank 1. Local rank 1
  // and 2 exist on node 0 only: their cross size is 1.
  auto uneven = HorovodLayout({0, 1, 0, 0}, Endpoints({"a", "b", "a", "a"}));
  CHECK(uneven[1].local_rank == 0);
  CHECK(uneven[1].local_size == 1);
  CHECK(uneven[1].cross_rank == 1);
  CHECK(uneven[1].cross_size == 2);
  CHECK(uneven[3].local_rank == 2);
  CHECK(uneven[3].local_size == 3);
  CHECK(uneven[3].cross_rank == 0);
  CHECK(uneven[3].cross_size == 1);
  CHECK(HorovodScopes(uneven) == std::map<std::string, int>{{"global", 4},
                                                            {"local_a", 3},
                                                            {"local_b", 1},
                                                            {"cross_0", 2},
                                                            {"cross_1", 1},
                                                            {"cross_2", 1}});

  // Two rayd nodes on one machine share its address; their local scopes must still differ.
  auto shared = HorovodLayout({0, 1}, Endpoints({"127.0.0.1", "127.0.0.1"}));
  CHECK(shared[0].hostname == "127.0.0.1-0");
  CHECK(shared[1].hostname == "127.0.0.1-1");
  CHECK(shared[1].cross_rank == 1);
}

TEST_CASE("the horovod launcher gives each rank horovodrun's variables", "[train][horovod]") {
  RankLaunch rank{.launcher = "horovod",
                  .world_rank = 3,
                  .world_size = 4,
                  .endpoints = Endpoints({"10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"}),
                  .rank_nodes = {0, 0, 1, 1},
                  .gloo_iface = "eth1"};
  Result<LaunchEnv> launch = ComposeLaunchEnv(rank, {}, {{"HOROVOD_GLOO_TIMEOUT_SECONDS", "5"}});
  REQUIRE(launch.ok());
  const Environment& env = launch->env;
  CHECK(env.at("HOROVOD_RANK") == "3");
  CHECK(env.at("HOROVOD_SIZE") == "4");
  CHECK(env.at("HOROVOD_LOCAL_RANK") == "1");
  CHECK(env.at("HOROVOD_LOCAL_SIZE") == "2");
  CHECK(env.at("HOROVOD_CROSS_RANK") == "1");
  CHECK(env.at("HOROVOD_CROSS_SIZE") == "2");
  CHECK(env.at("HOROVOD_HOSTNAME") == "10.0.0.2");
  CHECK(env.at("HOROVOD_GLOO_RENDEZVOUS_ADDR") == "10.0.0.1");  // rank 0's endpoint
  CHECK(env.at("HOROVOD_GLOO_RENDEZVOUS_PORT") == "29500");
  CHECK(env.at("HOROVOD_GLOO_IFACE") == "eth1");
  CHECK(env.at("HOROVOD_CONTROLLER") == "gloo");
  CHECK(env.at("HOROVOD_GLOO_TIMEOUT_SECONDS") == "5");  // the trainable's own env wins
  CHECK(env.count("MASTER_ADDR") == 0);
  CHECK(env.at("RAYD_WORLD_RANK") == "3");

  rank.rank_nodes.clear();
  Result<LaunchEnv> unplaced = ComposeLaunchEnv(rank, {}, {});
  REQUIRE_FALSE(unplaced.ok());
  CHECK_THAT(unplaced.status().message(), Contains("each rank's node"));
  CHECK(InterfaceOf("127.0.0.1") == "lo");
  CHECK(InterfaceOf("192.0.2.77").empty());  // TEST-NET: on no interface here
}

TEST_CASE("the rendezvous store speaks Horovod's protocol and empties finished scopes",
          "[train][horovod]") {
  HorovodStore store({{"global", 2}, {"local_h", 2}, {"cross_0", 1}});
  CHECK(store.Handle(Call("GET", "/global/rank_1")).status == 404);  // not there yet
  CHECK(store.Handle(Call("PUT", "/global/rank_0", "h")).status == 200);
  CHECK(store.Handle(Call("PUT", "/global/0", "addr0")).status == 200);
  CHECK_THAT(store.Waiting(), Contains("scope global has 1 of 2 ranks (rank 1 never came)"));
  CHECK(store.Handle(Call("PUT", "/global/rank_1", "h")).status == 200);
  CHECK(store.Handle(Call("PUT", "/global/1", "addr1")).status == 200);
  CHECK(store.Waiting().empty());
  http::Response got = store.Handle(Call("GET", "/global/1"));
  CHECK(got.status == 200);
  CHECK(got.body == "addr1");
  // A process set's scope holds its own keys, sized like its base scope.
  CHECK(store.Handle(Call("PUT", "/global_process_set_hash_ab12/0", "x")).status == 200);
  CHECK(store.Handle(Call("GET", "/global/0")).body == "addr0");

  // Rank 0 is done: the scope stays for rank 1; once rank 1 is done, it is emptied.
  CHECK(store.Handle(Call("DELETE", "/global/0")).status == 200);
  CHECK(store.Handle(Call("GET", "/global/1")).status == 200);
  CHECK(store.Handle(Call("DELETE", "/global/0")).status == 200);  // twice counts once
  CHECK(store.Cleared("global") == 0);
  CHECK(store.Handle(Call("DELETE", "/global/1")).status == 200);
  CHECK(store.Cleared("global") == 1);
  CHECK(store.Handle(Call("GET", "/global/1")).status == 404);  // a second hvd.init starts clean
  CHECK(store.Handle(Call("GET", "/global_process_set_hash_ab12/0")).status == 200);
  store.Handle(Call("DELETE", "/global_process_set_hash_ab12/0"));
  store.Handle(Call("DELETE", "/global_process_set_hash_ab12/1"));
  CHECK(store.Cleared("global_process_set_hash_ab12") == 1);

  CHECK(store.Handle(Call("GET", "/nokey")).status == 400);
  CHECK(store.Handle(Call("GET", "/")).status == 400);
  CHECK(store.Handle(Call("GET", "/rank_and_size/h:0")).status == 404);  // elastic: not served
}

TEST_CASE("the rendezvous serves over HTTP, only to the gang's nodes, and stops",
          "[train][horovod]") {
  auto rendezvous = HorovodRendezvous::Start("127.0.0.1", 0, {{"global", 1}}, {"127.0.0.1"});
  REQUIRE(rendezvous.ok());
  const std::string address = (*rendezvous)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  CHECK(Exchange(port, "GET", "/global/0") == "404 ");
  CHECK(Exchange(port, "PUT", "/global/rank_0", "myhost") == "200 ");
  CHECK(Exchange(port, "GET", "/global/rank_0") == "200 myhost");
  CHECK(Exchange(port, "DELETE", "/global/0") == "200 ");
  CHECK(Exchange(port, "GET", "/global/rank_0") == "404 ");
  CHECK(Exchange(port, "POST", "/global/0").rfind("405", 0) == 0);
  rendezvous->reset();
  CHECK(ConnectLoopback(port) < 0);  // gone with its attempt

  auto elsewhere = HorovodRendezvous::Start("127.0.0.1", 0, {{"global", 1}}, {"10.1.2.3"});
  REQUIRE(elsewhere.ok());
  const std::string other = (*elsewhere)->address();
  CHECK(
      Exchange(std::stoi(other.substr(other.rfind(':') + 1)), "GET", "/global/0").rfind("403", 0) ==
      0);

  // The port taken: the error says where.
  auto taken =
      HorovodRendezvous::Start("127.0.0.1", std::stoi(other.substr(other.rfind(':') + 1)), {}, {});
  REQUIRE_FALSE(taken.ok());
  CHECK_THAT(taken.status().message(), Contains("already in use"));
}

}  // namespace rayd::train::internal
