// The config's "cluster" section (the machine of the step-time model): defaults, units
// (GB/s in bytes, Gb/s in bits, µs), and bad values named with their key.
#include <boost/test/unit_test.hpp>

#include "config/config.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_config_cluster)

using namespace triad;
using nlohmann::json;

namespace {

namespace tt = boost::test_tools;

json with_cluster(const json& cluster) {
  json j = json::parse(R"({
    "model": {"n_layer": 2, "n_head": 2, "d_model": 16, "seq_len": 32, "vocab_size": 100},
    "train_batch_size": 8, "steps": 10
  })");
  if (!cluster.is_null()) j["cluster"] = cluster;
  return j;
}

}  // namespace

BOOST_AUTO_TEST_CASE(defaults_without_the_section) {
  const estimate::Cluster c = engine::parse_config(with_cluster(nullptr)).cluster;
  BOOST_TEST(c.ranks_per_node == 8);
  BOOST_TEST(c.cores_per_node == 0);
  BOOST_TEST(c.flops_per_rank == 0.0);
  BOOST_TEST(c.background_progress);
  BOOST_TEST(c.intra_node.bandwidth == 900e9);
  BOOST_TEST(c.intra_node.latency == 3e-6, tt::tolerance(1e-12));
  BOOST_TEST(c.inter_node.bandwidth == 25e9);
  BOOST_TEST(c.inter_node.latency == 5e-6, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(units_of_each_key) {
  const estimate::Cluster c = engine::parse_config(with_cluster(json::parse(R"({
    "ranks_per_node": 4, "cores_per_node": 2, "flops_per_rank": 1.2e11, "background_progress": false,
    "intra_node": {"bandwidth_Gbps": 80, "latency_us": 1.5},
    "inter_node": {"bandwidth_GBps": 50, "latency_us": 12}
  })")))
                                  .cluster;
  BOOST_TEST(c.ranks_per_node == 4);
  BOOST_TEST(c.cores_per_node == 2);
  BOOST_TEST(c.flops_per_rank == 1.2e11);
  BOOST_TEST(!c.background_progress);
  BOOST_TEST(c.intra_node.bandwidth == 10e9, tt::tolerance(1e-12));  // 80 Gb/s = 10 GB/s
  BOOST_TEST(c.intra_node.latency == 1.5e-6, tt::tolerance(1e-12));
  BOOST_TEST(c.inter_node.bandwidth == 50e9, tt::tolerance(1e-12));
  BOOST_TEST(c.inter_node.latency == 12e-6, tt::tolerance(1e-12));
  // A link given only its latency keeps the default bandwidth.
  const estimate::Cluster d =
      engine::parse_config(with_cluster(json::parse(R"({"inter_node": {"latency_us": 2}})"))).cluster;
  BOOST_TEST(d.inter_node.bandwidth == 25e9);
  BOOST_TEST(d.inter_node.latency == 2e-6, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(bad_values_name_the_key) {
  auto fails = [](const char* cluster, std::vector<std::string> parts) {
    test::check_error([&] { engine::parse_config(with_cluster(json::parse(cluster))); }, parts);
  };
  fails(R"({"ranks_per_node": 0})", {"cluster.ranks_per_node", "0"});
  fails(R"({"flops_per_rank": -1})", {"cluster.flops_per_rank", "-1"});
  fails(R"({"intra_node": {"bandwidth_GBps": 0}})", {"cluster.intra_node.bandwidth_GBps", "0"});
  fails(R"({"inter_node": {"bandwidth_GBps": 10, "bandwidth_Gbps": 80}})",
        {"cluster.inter_node.bandwidth_Gbps", "one bandwidth per link"});
  fails(R"({"inter_node": {"latency_us": -2}})", {"cluster.inter_node.latency_us", "-2"});
  fails(R"({"intra_node": {"bandwith_GBps": 10}})", {"cluster.intra_node", "bandwith_GBps"});
  fails(R"({"flops": 1e12})", {"cluster", "flops"});
  fails(R"({"background_progress": 1})", {"cluster.background_progress"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_config_cluster
