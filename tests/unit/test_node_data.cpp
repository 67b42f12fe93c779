// A node's data: its own directory and its platforms' own directories, the
// classes they are mapped to, and each platform's shard.
#include "actors/node/node_data.hpp"
#include "process.hpp"

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <numeric>

using namespace eg;
using eg::test::temp_dir;
namespace fs = std::filesystem;

namespace {

/// `n` grey images of `side` x `side` in dir/train/<cls>/, each of one value.
void images(const fs::path& dir, const std::string& cls, int n, int side = 8) {
  fs::create_directories(dir / "train" / cls);
  for (int i = 0; i < n; ++i) {
    std::ofstream f((dir / "train" / cls / (std::to_string(i) + ".pgm")).string(),
                    std::ios::binary);
    f << "P5\n" << side << " " << side << "\n255\n"
      << std::string(static_cast<size_t>(side * side), static_cast<char>(10 + 20 * i));
  }
}

config::cluster_config one_node(const temp_dir& dir) {
  config::cluster_config cfg;
  cfg.data.format = "image-folder";
  cfg.storage_dir = (dir.path / "store").string();
  config::node_config n;
  n.name = "a";
  for (auto p : {"p0", "p1", "p2"}) {
    config::platform_config pc;
    pc.name = p;
    n.platforms.push_back(pc);
  }
  cfg.nodes = {n};
  return cfg;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> v(static_cast<size_t>(last - first));
  std::iota(v.begin(), v.end(), first);
  return v;
}

} // namespace

BOOST_AUTO_TEST_SUITE(node_data)

BOOST_AUTO_TEST_CASE(platforms_with_folders_of_their_own_train_on_exactly_them) {
  temp_dir dir;
  images(dir.path / "node", "cat", 6);
  images(dir.path / "node", "dog", 6);
  images(dir.path / "p1", "dog", 3);
  images(dir.path / "p1", "eel", 2, 16);  // another size: resized to the node's 8 x 8
  images(dir.path / "p2", "fox", 4);
  auto cfg = one_node(dir);
  auto& me = cfg.nodes[0];
  me.data_dir = (dir.path / "node").string();
  me.platforms[1].data_dir = (dir.path / "p1").string();
  me.platforms[2].data_dir = (dir.path / "p2").string();
  auto d = actors::load_node_data(cfg, me, "", {});
  BOOST_TEST(d.own);
  // The node's classes first, then the platforms' new ones in their order.
  BOOST_TEST(d.train.classes == (std::vector<std::string>{"cat", "dog", "eel", "fox"}));
  BOOST_TEST(d.train.size() == 12 + 5 + 4);
  BOOST_TEST(d.train.shape.to_string() == "1x8x8");
  BOOST_TEST((d.node_part == std::pair<int64_t, int64_t>{0, 12}));
  BOOST_TEST((d.platform_parts.at("p1") == std::pair<int64_t, int64_t>{12, 17}));
  BOOST_TEST((d.platform_parts.at("p2") == std::pair<int64_t, int64_t>{17, 21}));
  // p2's samples are all foxes: relabelled to the node's list.
  auto labels = d.train.label_vector();
  for (int64_t i = 17; i < 21; ++i)
    BOOST_TEST(labels[static_cast<size_t>(i)] == 3);
  const auto all = cfg.platforms();
  auto shards = actors::partition_shards(cfg, me, all, d);
  // p0, the one without a folder, has the node's folder alone.
  BOOST_TEST(shards[0].size() == 12u);
  for (auto i : shards[0])
    BOOST_TEST(i < 12);
  BOOST_TEST(shards[1] == range(12, 17));
  BOOST_TEST(shards[2] == range(17, 21));
}

BOOST_AUTO_TEST_CASE(the_clusters_classes_map_every_folder) {
  temp_dir dir;
  images(dir.path / "p0", "dog", 2);
  images(dir.path / "p1", "cat", 3);
  images(dir.path / "p2", "dog", 1);
  auto cfg = one_node(dir);
  auto& me = cfg.nodes[0];
  for (size_t k = 0; k < 3; ++k)
    me.platforms[k].data_dir = (dir.path / ("p" + std::to_string(k))).string();
  // The cluster's list (data.classes, or the balancer node's data's).
  auto d = actors::load_node_data(cfg, me, "", {"ant", "cat", "dog"});
  BOOST_TEST(d.train.classes == (std::vector<std::string>{"ant", "cat", "dog"}));
  auto labels = d.train.label_vector();
  BOOST_TEST(labels == (std::vector<int64_t>{2, 2, 1, 1, 1, 2}));
  // A class outside the list is named.
  try {
    actors::load_node_data(cfg, me, "", {"ant", "dog"});
    BOOST_FAIL("a class outside the list was taken");
  } catch (const data::data_error& e) {
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST(std::string(e.what()).find("class 'cat'") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("platform p1") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_platform_without_a_folder_beside_one_with_needs_its_nodes) {
  temp_dir dir;
  images(dir.path / "p1", "dog", 2);
  auto cfg = one_node(dir);
  auto& me = cfg.nodes[0];
  me.platforms[1].data_dir = (dir.path / "p1").string();
  try {
    actors::load_node_data(cfg, me, "", {});
    BOOST_FAIL("platforms p0 and p2 were left without data");
  } catch (const data::data_error& e) {
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST(std::string(e.what()).find("platform p0 of node a has no data directory") !=
               std::string::npos);
  }
  // --data gives the node's folder: p0 and p2 split it.
  images(dir.path / "mine", "cat", 10);
  auto d = actors::load_node_data(cfg, me, (dir.path / "mine").string(), {});
  auto shards = actors::partition_shards(cfg, me, cfg.platforms(), d);
  BOOST_TEST(shards[0].size() + shards[2].size() == 10u);
  BOOST_TEST(shards[1] == range(10, 12));
}

BOOST_AUTO_TEST_SUITE_END()
