// The GCS over real RPC: node registration, heartbeats and failure detection, the job table,
// the namespaced KV, and recovery of every table by a new GCS on the same store (in memory and
// a real Redis).

#include <catch2/catch.hpp>

#include "common/node_info.h"
#include "gcs/gcs_server.h"
#include "gcs/table_store.h"
#include "redis_server.h"
#include "server_thread.h"
#include "test_util.h"

namespace rayd::gcs {
namespace {

using namespace std::chrono_literals;
using testing::ServerThread;

// Runs a GcsServer on a ServerThread over `store` (created on the server thread by
// `make_store`, or borrowed).
std::unique_ptr<ServerThread> StartGcs(std::function<TableStore*(EventLoop&, ServerThread::Keep&)>
                                           make_store,
                                       FailureDetectorConfig failure = {},
                                       std::string* cluster_id = nullptr,
                                       Millis driver_rebind_grace = Millis(30000)) {
  return std::make_unique<ServerThread>(
      [=](rpc::Dispatcher& d, EventLoop& loop, ServerThread::Keep& keep) {
        TableStore* store = make_store(loop, keep);
        GcsConfig config{failure, "test"};
        config.driver_rebind_grace = driver_rebind_grace;
        auto gcs = std::make_shared<GcsServer>(loop, *store, config);
        std::optional<Status> started;
        gcs->Start([&](Status s) { started = s; });
        REQUIRE(loop.RunUntil([&] { return started.has_value(); }, 10000ms));
        REQUIRE(started->ok());
        if (cluster_id) *cluster_id = gcs->cluster_id();
        gcs->RegisterMethods(d);
        keep.push_back(gcs);
      });
}

// Borrows a store that outlives the server (to restart a GCS on the same tables).
auto Borrowed(TableStore& store) {
  return [&store](EventLoop&, ServerThread::Keep&) { return &store; };
}

auto Redis(const testing::RedisServer& redis) {
  return [port = redis.port()](EventLoop& loop, ServerThread::Keep& keep) -> TableStore* {
    RedisOptions options;
    options.port = port;
    std::optional<Result<std::unique_ptr<TableStore>>> client;
    ConnectRedisTableStore(loop, options, [&](auto r) { client.emplace(std::move(r)); });
    REQUIRE(loop.RunUntil([&] { return client.has_value(); }, 10000ms));
    REQUIRE(client->ok());
    std::shared_ptr<TableStore> store(std::move(**client));
    keep.insert(keep.begin(), store);  // destroyed after the GCS that uses it
    return store.get();
  };
}

// A synchronous GCS client for the test thread.
class Client {
 public:
  explicit Client(const std::string& address)
      : rpc_(loop_, address, rpc::Options{testing::kTestToken, "test"}) {
    rpc_.Connect();
  }

  Status Register(const NodeInfo& info) {
    return Call<proto::Method::REGISTER_NODE>([&](proto::RegisterNodeRequest::Builder r) {
      runtime::NodeInfoToProto(info, r.initNode());
    });
  }
  proto::HeartbeatReply::Status Heartbeat(const NodeId& id) {
    auto status = proto::HeartbeatReply::Status::OK;
    Status s = Call<proto::Method::HEARTBEAT>(
        [&](proto::HeartbeatRequest::Builder r) { r.setNodeId(id.Hex()); },
        [&](proto::HeartbeatReply::Reader r) { status = r.getStatus(); });
    REQUIRE(s.ok());
    return status;
  }
  std::map<NodeId, NodeInfo> Nodes() {
    std::map<NodeId, NodeInfo> nodes;
    Status s = Call<proto::Method::GET_ALL_NODES>([](proto::GetAllNodesRequest::Builder) {},
                                                  [&](proto::GetAllNodesReply::Reader r) {
                                                    for (auto n : r.getNodes()) {
                                                      auto info = runtime::NodeInfoFromProto(n);
                                                      REQUIRE(info.ok());
                                                      nodes[info->node_id] = *info;
                                                    }
                                                  });
    REQUIRE(s.ok());
    return nodes;
  }
  Result<bool> KvPut(const std::string& ns, const std::string& key, const std::string& value,
                     bool overwrite) {
    bool added = false;
    Status s = Call<proto::Method::KV_PUT>(
        [&](proto::KvPutRequest::Builder r) {
          r.setNamespace(ns);
          r.setKey(key);
          r.setValue(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(value.data()),
                                         value.size()));
          r.setOverwrite(overwrite);
        },
        [&](proto::KvPutReply::Reader r) { added = r.getAdded(); });
    if (!s.ok()) return s;
    return added;
  }
  std::optional<std::string> KvGet(const std::string& ns, const std::string& key) {
    std::optional<std::string> value;
    Status s = Call<proto::Method::KV_GET>(
        [&](proto::KvGetRequest::Builder r) {
          r.setNamespace(ns);
          r.setKey(key);
        },
        [&](proto::KvGetReply::Reader reply) {
          if (reply.getFound()) {
            auto v = reply.getValue();
            value.emplace(reinterpret_cast<const char*>(v.begin()), v.size());
          }
        });
    REQUIRE(s.ok());
    return value;
  }
  std::vector<std::string> KvKeys(const std::string& ns, const std::string& prefix) {
    std::vector<std::string> keys;
    Status s = Call<proto::Method::KV_KEYS>(
        [&](proto::KvKeysRequest::Builder r) {
          r.setNamespace(ns);
          r.setPrefix(prefix);
        },
        [&](proto::KvKeysReply::Reader r) {
          for (auto k : r.getKeys()) keys.emplace_back(k.cStr());
        });
    REQUIRE(s.ok());
    return keys;
  }
  uint32_t KvDel(const std::string& ns, const std::string& key, bool by_prefix) {
    uint32_t deleted = 0;
    Status s = Call<proto::Method::KV_DEL>(
        [&](proto::KvDelRequest::Builder r) {
          r.setNamespace(ns);
          r.setKey(key);
          r.setByPrefix(by_prefix);
        },
        [&](proto::KvDelReply::Reader r) { deleted = r.getDeleted(); });
    REQUIRE(s.ok());
    return deleted;
  }
  // Calls method M and waits for its reply: `fill` takes M's request builder (nullptr: an empty
  // request), `read` M's reply reader.
  template <proto::Method M, typename Fill = std::nullptr_t, typename Read = std::nullptr_t>
  Status Call(Fill&& fill = nullptr, Read&& read = nullptr) {
    return rpc::CallAndWait<M>(loop_, rpc_, fill, 10000ms, read);
  }

 private:
  EventLoop loop_;
  rpc::RpcClient rpc_;
};

NodeInfo FakeNode(const std::string& name, double cpus) {
  NodeInfo info;
  info.node_id = NodeId::FromRandom();
  info.address = name + ":7000";
  info.hostname = name;
  info.ip = "10.0.0.1";
  info.total = scheduler::ResourceSet{{"CPU", cpus}, {"GPU", 0.5}};
  info.available = info.total;
  info.labels = {{"zone", "a"}};
  return info;
}

TEST_CASE("nodes register, heartbeat, and are listed with their resources", "[gcs]") {
  auto store = MakeInMemoryTableStore();
  auto server = StartGcs(Borrowed(*store));
  Client client(server->address());
  NodeInfo a = FakeNode("a", 4), b = FakeNode("b", 2);
  REQUIRE(client.Register(a).ok());
  REQUIRE(client.Register(b).ok());
  CHECK(client.Heartbeat(a.node_id) == proto::HeartbeatReply::Status::OK);
  CHECK(client.Heartbeat(NodeId::FromRandom()) == proto::HeartbeatReply::Status::UNKNOWN);
  auto nodes = client.Nodes();
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[a.node_id].alive);
  CHECK(nodes[a.node_id].total == a.total);
  CHECK(nodes[a.node_id].labels == a.labels);
  CHECK(nodes[b.node_id].total.Get("CPU") == scheduler::FixedPoint::FromWhole(2));
}

TEST_CASE("a node that stops heartbeating is declared dead and must rejoin anew", "[gcs]") {
  auto store = MakeInMemoryTableStore();
  FailureDetectorConfig failure{Millis(50), 3, Millis(0)};
  auto server = StartGcs(Borrowed(*store), failure);
  Client client(server->address());
  NodeInfo quiet = FakeNode("quiet", 1), chatty = FakeNode("chatty", 1);
  REQUIRE(client.Register(quiet).ok());
  REQUIRE(client.Register(chatty).ok());
  const auto start = Clock::now();
  bool quiet_dead = false;
  while (!quiet_dead && Clock::now() - start < 10s) {
    CHECK(client.Heartbeat(chatty.node_id) == proto::HeartbeatReply::Status::OK);
    quiet_dead = !client.Nodes()[quiet.node_id].alive;
  }
  REQUIRE(quiet_dead);
  // Never before its timeout (3 x 50 ms).
  CHECK(Clock::now() - start >= 150ms);
  auto nodes = client.Nodes();
  CHECK(nodes[chatty.node_id].alive);
  CHECK(nodes[quiet.node_id].death_reason.find("missed 3 heartbeats") != std::string::npos);
  CHECK(client.Heartbeat(quiet.node_id) == proto::HeartbeatReply::Status::DEAD);
  CHECK(client.Register(quiet).code() == StatusCode::kAlreadyExists);
}

TEST_CASE("a node that unregisters is marked dead with its reason", "[gcs]") {
  auto store = MakeInMemoryTableStore();
  auto server = StartGcs(Borrowed(*store));
  Client client(server->address());
  NodeInfo n = FakeNode("n", 1);
  REQUIRE(client.Register(n).ok());
  Status s =
      client.Call<proto::Method::UNREGISTER_NODE>([&](proto::UnregisterNodeRequest::Builder r) {
        r.setNodeId(n.node_id.Hex());
        r.setReason("stopped by test");
      });
  REQUIRE(s.ok());
  auto nodes = client.Nodes();
  CHECK_FALSE(nodes[n.node_id].alive);
  CHECK(nodes[n.node_id].death_reason == "stopped by test");
}

TEST_CASE("a drained node is told so by its heartbeats, keeps its drain in the store, and is "
          "declared dead when it outstays its deadline",
          "[gcs][drain]") {
  auto store = MakeInMemoryTableStore();
  FailureDetectorConfig failure{Millis(50), 3, Millis(0)};
  auto server = StartGcs(Borrowed(*store), failure);
  Client client(server->address());
  NodeInfo head = FakeNode("head", 1), n = FakeNode("n", 2);
  head.is_head = true;
  REQUIRE(client.Register(head).ok());
  REQUIRE(client.Register(n).ok());
  auto drain = [&](const NodeId& id, int64_t deadline_ms) {
    return client.Call<proto::Method::DRAIN_NODE>([&](proto::DrainNodeRequest::Builder r) {
      r.setNodeId(id.Hex());
      r.setDeadlineMs(deadline_ms);
      r.setReason("spot preemption");
    });
  };
  Status refused = drain(head.node_id, NowUnixMs() + 60'000);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message().find("head's own node") != std::string::npos);
  CHECK(drain(NodeId::FromRandom(), NowUnixMs()).code() == StatusCode::kNotFound);

  const int64_t deadline = NowUnixMs() + 400;
  REQUIRE(drain(n.node_id, deadline).ok());
  NodeInfo seen = client.Nodes()[n.node_id];
  CHECK(seen.draining());
  CHECK(seen.drain_deadline_ms == deadline);
  CHECK(seen.drain_reason == "spot preemption");
  // In the store too (a restarted head keeps it), and in the node's heartbeat replies.
  auto stored = runtime::NodeInfoFromJson(runtime::NodeInfoToJson(seen));
  REQUIRE(stored.ok());
  CHECK(stored->drain_deadline_ms == deadline);
  CHECK(stored->drain_reason == "spot preemption");
  int64_t told = 0;
  std::string why;
  REQUIRE(client
              .Call<proto::Method::HEARTBEAT>(
                  [&](proto::HeartbeatRequest::Builder r) { r.setNodeId(n.node_id.Hex()); },
                  [&](proto::HeartbeatReply::Reader r) {
                    told = r.getDrainDeadlineMs();
                    why = r.getDrainReason();
                  })
              .ok());
  CHECK(told == deadline);
  CHECK(why == "spot preemption");
  // Still heartbeating a heartbeat timeout past its deadline: declared dead, saying why.
  const auto start = Clock::now();
  while (client.Nodes()[n.node_id].alive && Clock::now() - start < 10s) {
    client.Heartbeat(n.node_id);
    client.Heartbeat(head.node_id);
  }
  const NodeInfo gone = client.Nodes()[n.node_id];
  REQUIRE_FALSE(gone.alive);
  CHECK_FALSE(gone.draining());
  CHECK(gone.drain_deadline_ms == deadline);  // how a driver tells a preemption from a failure
  CHECK(gone.death_reason.starts_with("drained (spot preemption), but still there"));
  CHECK(NowUnixMs() >= deadline + 150);
  CHECK(drain(n.node_id, NowUnixMs()).message().find("already dead") != std::string::npos);
}

TEST_CASE("the KV is namespaced and supports prefixes", "[gcs][kv]") {
  auto store = MakeInMemoryTableStore();
  auto server = StartGcs(Borrowed(*store));
  Client client(server->address());
  CHECK(*client.KvPut("ns1", "rdzv/0", "10.0.0.1:29500", false) == true);
  CHECK(*client.KvPut("ns1", "rdzv/0", "other", false) == false);
  CHECK(*client.KvGet("ns1", "rdzv/0") == "10.0.0.1:29500");
  CHECK(*client.KvPut("ns1", "rdzv/0", "overwritten", true) == false);
  CHECK(*client.KvGet("ns1", "rdzv/0") == "overwritten");
  CHECK(*client.KvPut("ns1", "rdzv/1", std::string("a\0b", 3), false));
  CHECK(*client.KvGet("ns1", "rdzv/1") == std::string("a\0b", 3));
  CHECK(*client.KvPut("ns1", "other", "x", false));
  CHECK_FALSE(client.KvGet("ns2", "rdzv/0").has_value());
  CHECK(client.KvKeys("ns1", "rdzv/") == std::vector<std::string>{"rdzv/0", "rdzv/1"});
  CHECK(client.KvDel("ns1", "rdzv/", true) == 2);
  CHECK(client.KvKeys("ns1", "") == std::vector<std::string>{"other"});
  CHECK(client.KvDel("ns1", "other", false) == 1);
  CHECK(client.KvDel("ns1", "other", false) == 0);
}

TEST_CASE("jobs are added, finished and listed", "[gcs][jobs]") {
  auto store = MakeInMemoryTableStore();
  auto server = StartGcs(Borrowed(*store));
  Client client(server->address());
  std::string job_id;
  REQUIRE(client
              .Call<proto::Method::ADD_JOB>(
                  [](proto::AddJobRequest::Builder r) {
                    auto job = r.initJob();
                    job.setDriverPid(42);
                    job.setEntrypoint("./train");
                  },
                  [&](proto::AddJobReply::Reader r) { job_id = r.getJobId(); })
              .ok());
  CHECK(job_id.size() == 32);
  REQUIRE(client
              .Call<proto::Method::MARK_JOB_FINISHED>(
                  [&](proto::MarkJobFinishedRequest::Builder r) { r.setJobId(job_id); })
              .ok());
  bool seen = false;
  REQUIRE(client
              .Call<proto::Method::GET_ALL_JOBS>(
                  nullptr,
                  [&](proto::GetAllJobsReply::Reader r) {
                    for (auto job : r.getJobs()) {
                      if (job.getJobId() != job_id) continue;
                      seen = true;
                      CHECK(job.getIsDead());
                      CHECK(job.getDriverPid() == 42);
                      CHECK(std::string(job.getEntrypoint().cStr()) == "./train");
                    }
                  })
              .ok());
  CHECK(seen);
}

// ADD_JOB under `id` ("" : the GCS names it); the job's id.
std::string AddJob(Client& client, const std::string& id) {
  std::string added;
  Status s = client.Call<proto::Method::ADD_JOB>(
      [&](proto::AddJobRequest::Builder r) {
        auto job = r.initJob();
        job.setJobId(id);
        job.setEntrypoint("./driver");
      },
      [&](proto::AddJobReply::Reader r) { added = r.getJobId(); });
  REQUIRE(s.ok());
  return added;
}

// Each job's is_dead.
std::map<std::string, bool> JobsDead(Client& client) {
  std::map<std::string, bool> dead;
  REQUIRE(client
              .Call<proto::Method::GET_ALL_JOBS>(nullptr,
                                                 [&](proto::GetAllJobsReply::Reader r) {
                                                   for (auto job : r.getJobs()) {
                                                     dead[job.getJobId()] = job.getIsDead();
                                                   }
                                                 })
              .ok());
  return dead;
}

TEST_CASE("a restarted GCS keeps the jobs whose drivers add them again and ends the others "
          "after the grace",
          "[gcs][jobs][recovery]") {
  auto store = MakeInMemoryTableStore();
  std::string back, gone;
  {
    auto server = StartGcs(Borrowed(*store));
    Client a(server->address()), b(server->address());
    back = AddJob(a, "");
    gone = AddJob(b, "");
  }  // the head dies with both drivers connected: the jobs stay alive in the store
  auto server = StartGcs(Borrowed(*store), {}, nullptr, Millis(300));
  Client driver(server->address());
  CHECK(AddJob(driver, back) == back);  // its driver reconnects and adds it again
  REQUIRE(testing::WaitFor([&] { return JobsDead(driver)[gone]; }, 10000ms));
  CHECK(!JobsDead(driver)[back]);
}

// Registers a node and writes a KV entry through one GCS, then starts a second GCS on the same
// tables and checks it knows both, and keeps the cluster id.
void CheckRecovery(const std::function<std::unique_ptr<ServerThread>(std::string*)>& start) {
  NodeInfo node = FakeNode("survivor", 3);
  std::string first_id, second_id;
  {
    auto server = start(&first_id);
    Client client(server->address());
    REQUIRE(client.Register(node).ok());
    REQUIRE(*client.KvPut("train", "rendezvous", "10.0.0.9:29500", true));
  }
  auto server = start(&second_id);
  Client client(server->address());
  CHECK(second_id == first_id);
  auto nodes = client.Nodes();
  REQUIRE(nodes.count(node.node_id) == 1);
  CHECK(nodes[node.node_id].alive);
  CHECK(nodes[node.node_id].total == node.total);
  CHECK(client.KvGet("train", "rendezvous") == std::optional<std::string>("10.0.0.9:29500"));
  // The recovered node re-registers under its id, as a reconnecting node daemon does.
  CHECK(client.Register(node).ok());
  CHECK(client.Heartbeat(node.node_id) == proto::HeartbeatReply::Status::OK);
}

TEST_CASE("a new GCS on the same in-memory store recovers every table", "[gcs][recovery]") {
  auto store = MakeInMemoryTableStore();
  CheckRecovery([&](std::string* id) { return StartGcs(Borrowed(*store), {}, id); });
}

TEST_CASE("a restarted GCS recovers nodes and KV from a real Redis", "[gcs][recovery][redis]") {
  testing::RedisServer redis;
  CheckRecovery([&](std::string* id) { return StartGcs(Redis(redis), {}, id); });
}

}  // namespace
}  // namespace rayd::gcs
