// Nodes that train on data of their own: real `edgegossip node` processes on
// 127.0.0.1, each started with only its own image folder (--data), no data
// set shared between them.
#include "process.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <csignal>
#include <fstream>
#include <map>
#include <sstream>

using namespace eg::test;

namespace {

const char* classes_toml =
  "classes = [\"T-shirt-top\", \"Trouser\", \"Pullover\", \"Dress\", \"Coat\", \"Sandal\", "
  "\"Shirt\", \"Sneaker\", \"Bag\", \"Ankle-boot\"]\n";

/// A cluster file of three nodes a, b, c on free ports, image folders, the
/// Fashion-MNIST folder names as the cluster's classes; no node data.
std::string cluster_file(const temp_dir& dir, uint32_t epochs, double slowdown = 1) {
  std::ostringstream toml;
  toml << "[cluster]\nid = \"own-data-test\"\nseed = 5\nbalancer = \"a\"\n"
       << "[data]\nformat = \"image-folder\"\n" << classes_toml
       << "[train]\nepochs = " << epochs << "\n"
       << "[strategy]\nname = \"gosgd\"\nschedule = \"sync\"\nexchange_probability = 0.3\n"
       << "[storage]\ndir = \"" << (dir.path / "store").string() << "\"\n"
       << "[output]\ndir = \"" << (dir.path / "runs").string() << "\"\n";
  for (auto name : {"a", "b", "c"})
    toml << "[[nodes]]\nname = \"" << name << "\"\nhost = \"127.0.0.1\"\nport = " << free_port()
         << "\n[[nodes.platforms]]\nname = \"p" << name << "\"\nslowdown = " << slowdown << "\n";
  const auto path = (dir.path / "cluster.toml").string();
  write_file(path, toml.str());
  return path;
}

/// Fashion-MNIST written as three nodes' PNG folders, half of each class
/// on its own node (the project's script): every node a different class mix.
void write_folders(const temp_dir& dir, int train, int test) {
  // process runs a path (execv): the script through the shell's python3.
  process p({"/bin/sh", "-c", "exec python3 \"$@\"", "python3",
             std::string(EG_SOURCE_DIR) + "/scripts/fashion-mnist-folders.py",
             (dir.path / "folders").string(), "--skew", "0.5", "--train", std::to_string(train),
             "--test", std::to_string(test)},
            (dir.path / "folders.log").string());
  BOOST_REQUIRE_MESSAGE(p.wait(std::chrono::seconds(300)) == 0, p.output());
}

/// A Python with torch (the python3 on the path, else Debian's
/// /usr/bin/python3), as a path; empty where there is none.
std::string python_with_torch() {
  for (const std::string py : {"python3", "/usr/bin/python3"})
    if (std::system((py + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0) {
      if (py[0] == '/')
        return py;
      std::string path;
      if (FILE* f = popen("command -v python3", "r")) {
        char buf[4096];
        if (fgets(buf, sizeof buf, f))
          path = buf;
        pclose(f);
      }
      while (!path.empty() && (path.back() == '\n' || path.back() == ' '))
        path.pop_back();
      return path;
    }
  return {};
}

/// The exported model in Python: its class names, and its accuracy on the
/// PNG images of the test folders given (grey 8-bit PNGs as the script
/// writes them), all of them together.
const char* check_export_py = R"(
import os, struct, sys, zlib
import torch

def png(path):
    data = open(path, 'rb').read()
    pos, w, h, idat = 8, 0, 0, b''
    while pos < len(data):
        n, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b'IHDR':
            w, h = struct.unpack('>II', body[:8])
        elif kind == b'IDAT':
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    rows = [raw[y * (w + 1) + 1:(y + 1) * (w + 1)] for y in range(h)]
    assert all(raw[y * (w + 1)] == 0 for y in range(h)), 'filtered rows'
    return torch.tensor(list(b''.join(rows)), dtype=torch.uint8).view(h, w)

model = torch.jit.load(sys.argv[1])
names = list(model.classes)
print('classes', '|'.join(names))
print('input_shape', list(model.input_shape))
images, labels = [], []
for root in sys.argv[2:]:
    for c in sorted(os.listdir(root)):
        for f in sorted(os.listdir(os.path.join(root, c))):
            images.append(png(os.path.join(root, c, f)))
            labels.append(names.index(c))
x = torch.stack(images)
with torch.no_grad():
    predicted = model(x).argmax(1)
correct = int((predicted == torch.tensor(labels)).sum())
print('accuracy', correct / len(labels), len(labels))
print('first', names[int(predicted[0])])
)";

} // namespace

BOOST_AUTO_TEST_CASE(three_nodes_train_on_their_own_image_folders) {
  temp_dir dir;
  write_folders(dir, 3000, 300);
  const auto config = cluster_file(dir, 3);
  std::vector<std::unique_ptr<process>> nodes;
  for (auto name : {"a", "b", "c"})
    nodes.push_back(std::make_unique<process>(
      std::vector<std::string>{EG_BINARY, "node", "--config", config, "--node", name, "--data",
                               (dir.path / "folders" / name).string()},
      (dir.path / (std::string(name) + ".log")).string()));
  for (auto& n : nodes) {
    auto code = n->wait(std::chrono::seconds(500));
    BOOST_TEST_INFO("node output:\n" << n->output());
    BOOST_REQUIRE_EQUAL(code, 0);
  }
  for (auto& n : nodes) {
    // Each read exactly its own folder: 3,000 images, its own test folder.
    BOOST_TEST_INFO(n->output());
    BOOST_TEST(n->output().find("3000 training samples of 1x28x28 (its own, 10 classes)") !=
               std::string::npos);
    BOOST_TEST(n->output().find("/test'") != std::string::npos);
  }
  auto run = only_run_dir((dir.path / "runs").string());
  auto cluster = read_csv((run / "cluster.csv").string());
  BOOST_REQUIRE_EQUAL(cluster.size(), 3u);
  const double averaged = std::stod(cluster.back()["averaged_accuracy"]);
  BOOST_TEST(averaged > 0.3, "averaged model accuracy " << averaged << " (chance: 0.1)");
  // Tested on every node's own test folder: 300 images each, no sample
  // sent; the cluster's accuracy is all their correct answers over all
  // their samples.
  BOOST_TEST(cluster.back()["test_samples"] == "900");
  const auto tests = cluster.back()["node_tests"];  // a=ACC/300;b=ACC/300;c=ACC/300
  std::map<std::string, double> node_accuracy;
  {
    std::stringstream ss(tests);
    for (std::string part; std::getline(ss, part, ';');) {
      const auto eq = part.find('='), slash = part.find('/');
      BOOST_REQUIRE(eq != std::string::npos && slash != std::string::npos);
      BOOST_TEST(part.substr(slash + 1) == "300", tests);
      node_accuracy[part.substr(0, eq)] = std::stod(part.substr(eq + 1, slash - eq - 1));
    }
  }
  BOOST_REQUIRE_EQUAL(node_accuracy.size(), 3u);
  BOOST_TEST(std::abs((node_accuracy["a"] + node_accuracy["b"] + node_accuracy["c"]) / 3 -
                      averaged) < 1e-5,
             tests << " against " << averaged);
  BOOST_TEST(nodes[0]->output().find("averaged model accuracy") != std::string::npos);
  const auto python = python_with_torch();
  if (python.empty()) {
    BOOST_TEST_MESSAGE("python3 has no torch: the export's check in Python is skipped");
    return;
  }
  // One normalisation for the cluster, combined from the three nodes' sums
  // (no sample sent); every node tested with it, and the export carries it.
  BOOST_TEST(nodes[0]->output().find(
               "normalisation combined from the statistics of nodes a, b, c") != std::string::npos);
  // Python's torch.jit.load of the export: the class names, the input shape,
  // and on the three nodes' test folders together the cluster's accuracy.
  write_file((dir.path / "check.py").string(), check_export_py);
  process py({python, (dir.path / "check.py").string(), (run / "model_scripted.pt").string(),
              (dir.path / "folders" / "a" / "test").string(),
              (dir.path / "folders" / "b" / "test").string(),
              (dir.path / "folders" / "c" / "test").string()},
             (dir.path / "check.log").string());
  BOOST_REQUIRE_MESSAGE(py.wait(std::chrono::seconds(120)) == 0, py.output());
  const auto out = py.output();
  BOOST_TEST_INFO(out);
  BOOST_TEST(out.find("classes T-shirt-top|Trouser|Pullover|Dress|Coat|Sandal|Shirt|Sneaker|Bag|"
                      "Ankle-boot") != std::string::npos);
  BOOST_TEST(out.find("input_shape [1, 28, 28]") != std::string::npos);
  const auto at = out.find("accuracy ");
  BOOST_REQUIRE(at != std::string::npos);
  const double in_python = std::stod(out.substr(at + 9));
  BOOST_TEST(out.find(" 900") != std::string::npos);
  // Within one answer of 900: Python's and LibTorch's arithmetic differ in
  // the last bits.
  BOOST_TEST(std::abs(in_python - averaged) <= 1.0 / 900 + 1e-6,
             "Python " << in_python << ", the cluster in the run " << averaged);
}

BOOST_AUTO_TEST_CASE(a_node_whose_data_has_a_class_outside_the_list_stops_naming_it) {
  temp_dir dir;
  const auto config = cluster_file(dir, 1);
  // One PGM image in a folder named for no class of the list.
  std::filesystem::create_directories(dir.path / "mine" / "train" / "Hat");
  {
    std::ofstream f((dir.path / "mine" / "train" / "Hat" / "1.pgm").string(), std::ios::binary);
    f << "P5\n28 28\n255\n" << std::string(28 * 28, '\x40');
  }
  auto [code, out] = run_binary({"node", "--config", config, "--node", "a", "--data",
                                 (dir.path / "mine").string()},
                                (dir.path / "a.log").string(), std::chrono::seconds(60));
  BOOST_TEST_INFO(out);
  BOOST_TEST(code == 2);
  BOOST_TEST(out.find("'Hat'") != std::string::npos);
  BOOST_TEST(out.find("class list") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_missing_data_directory_stops_the_node_naming_it) {
  temp_dir dir;
  const auto config = cluster_file(dir, 1);
  const auto missing = (dir.path / "nowhere").string();
  auto [code, out] = run_binary({"node", "--config", config, "--node", "a", "--data", missing},
                                (dir.path / "a.log").string(), std::chrono::seconds(60));
  BOOST_TEST_INFO(out);
  BOOST_TEST(code == 2);
  BOOST_TEST(out.find(missing) != std::string::npos);
}

namespace {

/// Nodes a and b on their own folders, then node c on `c_data` once node
/// a's balancer took a platform in; each node's process.
std::vector<std::unique_ptr<process>> start_with_c(const temp_dir& dir, const std::string& config,
                                                   const std::filesystem::path& c_data) {
  std::vector<std::unique_ptr<process>> nodes;
  for (auto name : {"a", "b"})
    nodes.push_back(std::make_unique<process>(
      std::vector<std::string>{EG_BINARY, "node", "--config", config, "--node", name, "--data",
                               (dir.path / "folders" / name).string()},
      (dir.path / (std::string(name) + ".log")).string()));
  BOOST_REQUIRE_MESSAGE(
    nodes[0]->wait_for_output("balancer: platform pa joined", std::chrono::seconds(120)),
    nodes[0]->output());
  nodes.push_back(std::make_unique<process>(
    std::vector<std::string>{EG_BINARY, "node", "--config", config, "--node", "c", "--data",
                             c_data.string()},
    (dir.path / "c.log").string()));
  return nodes;
}

/// The last line of a process's output.
std::string last_line(const std::string& out) {
  auto end = out.find_last_not_of('\n');
  if (end == std::string::npos)
    return {};
  auto start = out.rfind('\n', end);
  return out.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

} // namespace

BOOST_AUTO_TEST_CASE(a_platform_whose_data_has_another_shape_is_refused_at_join) {
  // Node c's photos are RGB where the others' are grey: the balancer
  // refuses its platform at join, node c hears why and exits 2 with the
  // reason as its last line, and the other two train to the end without it.
  temp_dir dir;
  write_folders(dir, 300, 50);
  const auto config = cluster_file(dir, 3, 20);
  for (auto cls : {"Trouser", "Bag"}) {
    std::filesystem::create_directories(dir.path / "rgb" / "train" / cls);
    for (int i = 0; i < 4; ++i) {
      std::ofstream f((dir.path / "rgb" / "train" / cls / (std::to_string(i) + ".ppm")).string(),
                      std::ios::binary);
      f << "P6\n32 32\n255\n" << std::string(32 * 32 * 3, static_cast<char>(40 * i));
    }
  }
  auto nodes = start_with_c(dir, config, dir.path / "rgb");
  auto& a = *nodes[0];
  auto& c = *nodes[2];
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("refused platform pc of node c", std::chrono::seconds(120)),
                        a.output() << "\n--- c:\n" << c.output());
  const auto refused_at = std::chrono::steady_clock::now();
  // The console shows the refusal while the run goes on.
  auto [console, shown] = run_binary({"console", "127.0.0.1:" + std::to_string(port_of(config, "a")),
                                      "--config", config, "--once", "--json"},
                                     (dir.path / "console.log").string(), std::chrono::seconds(30));
  BOOST_TEST(console == 0, shown);
  BOOST_TEST(shown.find("\"refused\"") != std::string::npos, shown);
  BOOST_TEST(shown.find("platform pc of node c refused: its data is 3x32x32") != std::string::npos,
             shown);
  const auto code = c.wait(std::chrono::seconds(30));
  const auto waited = std::chrono::steady_clock::now() - refused_at;
  BOOST_TEST(code == 2, c.output());
  BOOST_TEST((waited < std::chrono::seconds(15)),
             std::chrono::duration<double>(waited).count() << " s after the refusal");
  const auto last = last_line(c.output());
  BOOST_TEST(last.find("node c: the cluster refused platform pc: its data is 3x32x32") !=
               std::string::npos,
             last);
  BOOST_TEST(last.find("1x28x28") != std::string::npos, last);
  BOOST_TEST(last.find("exit code 2") != std::string::npos, last);
  for (size_t k : {0u, 1u}) {
    BOOST_TEST(nodes[k]->wait(std::chrono::seconds(300)) == 0, nodes[k]->output());
  }
  // The run trained to the end without it, and said so in its epoch lines.
  auto run = only_run_dir((dir.path / "runs").string());
  BOOST_TEST(read_csv((run / "cluster.csv").string()).size() == 3u);
  BOOST_TEST(a.output().find("2 platforms up; refused: pc (its data is 3x32x32") !=
               std::string::npos,
             a.output());
}

BOOST_AUTO_TEST_CASE(a_node_with_a_class_outside_the_list_is_left_out_and_the_others_train) {
  // Node c's folder holds a class outside data.classes: it stops at start
  // with exit code 2 and the reason last, after telling the cluster, whose
  // run goes on without its platform.
  temp_dir dir;
  write_folders(dir, 300, 50);
  const auto config = cluster_file(dir, 2, 20);
  std::filesystem::create_directories(dir.path / "hats" / "train" / "Hat");
  {
    std::ofstream f((dir.path / "hats" / "train" / "Hat" / "1.pgm").string(), std::ios::binary);
    f << "P5\n28 28\n255\n" << std::string(28 * 28, '\x40');
  }
  auto nodes = start_with_c(dir, config, dir.path / "hats");
  auto& c = *nodes[2];
  BOOST_TEST(c.wait(std::chrono::seconds(60)) == 2, c.output());
  BOOST_TEST(last_line(c.output()).find("'Hat'") != std::string::npos, c.output());
  BOOST_TEST(c.output().find("told node a that it cannot start") != std::string::npos,
             c.output());
  for (size_t k : {0u, 1u})
    BOOST_TEST(nodes[k]->wait(std::chrono::seconds(300)) == 0, nodes[k]->output());
  BOOST_TEST(nodes[0]->output().find("node c could not start, platform pc is refused") !=
               std::string::npos,
             nodes[0]->output());
  auto run = only_run_dir((dir.path / "runs").string());
  BOOST_TEST(read_csv((run / "cluster.csv").string()).size() == 2u);
}

BOOST_AUTO_TEST_CASE(the_classes_come_from_the_balancer_nodes_data_and_a_platform_reads_its_own) {
  namespace fs = std::filesystem;
  temp_dir dir;
  write_folders(dir, 1500, 150);
  // Node b holds three classes only; node c's platforms read a folder each,
  // pc1's with two classes of b's and no test split. No data.classes: the
  // cluster's classes are node a's folders'.
  fs::create_directories(dir.path / "few" / "train");
  fs::create_directories(dir.path / "few" / "test");
  fs::create_directories(dir.path / "c1" / "train");
  for (auto split : {"train", "test"})
    for (auto cls : {"Trouser", "Bag", "Sneaker"})
      fs::copy(dir.path / "folders" / "b" / split / cls, dir.path / "few" / split / cls,
               fs::copy_options::recursive);
  for (auto cls : {"Dress", "Coat"})
    fs::copy(dir.path / "folders" / "b" / "train" / cls, dir.path / "c1" / "train" / cls,
             fs::copy_options::recursive);
  int64_t c1_images = 0;
  for (auto& f : fs::recursive_directory_iterator(dir.path / "c1"))
    c1_images += f.is_regular_file() ? 1 : 0;
  std::ostringstream toml;
  toml << "[cluster]\nid = \"own-classes-test\"\nseed = 5\nbalancer = \"a\"\n"
       << "[data]\nformat = \"image-folder\"\n"
       << "[train]\nepochs = 2\n"
       << "[strategy]\nname = \"gosgd\"\nschedule = \"sync\"\nexchange_probability = 0.3\n"
       << "[storage]\ndir = \"" << (dir.path / "store").string() << "\"\n"
       << "[output]\ndir = \"" << (dir.path / "runs").string() << "\"\n";
  for (auto name : {"a", "b"})
    toml << "[[nodes]]\nname = \"" << name << "\"\nhost = \"127.0.0.1\"\nport = " << free_port()
         << "\n[[nodes.platforms]]\nname = \"p" << name << "\"\n";
  toml << "[[nodes]]\nname = \"c\"\nhost = \"127.0.0.1\"\nport = " << free_port()
       << "\n[[nodes.platforms]]\nname = \"pc0\"\ndata = \"" << (dir.path / "folders" / "c").string()
       << "\"\n[[nodes.platforms]]\nname = \"pc1\"\ndata = \"" << (dir.path / "c1").string()
       << "\"\n";
  const auto config = (dir.path / "cluster.toml").string();
  write_file(config, toml.str());
  auto start = [&](const std::string& name, const std::vector<std::string>& more) {
    std::vector<std::string> args{EG_BINARY, "node", "--config", config, "--node", name};
    args.insert(args.end(), more.begin(), more.end());
    return std::make_unique<process>(args, (dir.path / (name + ".log")).string());
  };
  // Node b starts first: it waits for node a's classes before it reads its data.
  auto b = start("b", {"--data", (dir.path / "few").string()});
  BOOST_REQUIRE_MESSAGE(b->wait_for_output("asking node a for the classes of its data",
                                           std::chrono::seconds(60)),
                        b->output());
  auto a = start("a", {"--data", (dir.path / "folders" / "a").string()});
  auto c = start("c", {});
  for (auto* n : {a.get(), b.get(), c.get()}) {
    const auto code = n->wait(std::chrono::seconds(400));
    BOOST_TEST_INFO("node output:\n" << n->output());
    BOOST_REQUIRE_EQUAL(code, 0);
  }
  BOOST_TEST_INFO(b->output());
  BOOST_TEST(b->output().find("the cluster's 10 classes from node a") != std::string::npos);
  BOOST_TEST(b->output().find("(its own, 10 classes)") != std::string::npos);
  BOOST_TEST_INFO(c->output());
  BOOST_TEST(c->output().find("the cluster's 10 classes from node") != std::string::npos);
  // Each of c's platforms trained on exactly its own folder: pc1 on the
  // images of c1, every epoch (GoSGD trains on all of a shard).
  auto run = only_run_dir((dir.path / "runs").string());
  int pc1_rows = 0;
  for (auto& row : read_csv((run / "metrics.csv").string()))
    if (row["platform"] == "pc1") {
      ++pc1_rows;
      BOOST_TEST(std::stoll(row["samples"]) == c1_images);
    }
  BOOST_TEST(pc1_rows == 2);
  // The averaged model was tested on the three nodes' own test data.
  auto cluster = read_csv((run / "cluster.csv").string());
  BOOST_REQUIRE(!cluster.empty());
  const auto tests = cluster.back()["node_tests"];
  BOOST_TEST(tests.find("a=") != std::string::npos, tests);
  BOOST_TEST(tests.find("b=") != std::string::npos, tests);
  BOOST_TEST(tests.find("c=") != std::string::npos, tests);
}

BOOST_AUTO_TEST_CASE(a_class_outside_the_balancer_nodes_classes_is_named) {
  namespace fs = std::filesystem;
  temp_dir dir;
  // Node a (the balancer) holds two classes; node b a third.
  const std::vector<std::pair<std::string, std::string>> folders{
    {"a", "Trouser"}, {"a", "Bag"}, {"b", "Hat"}};
  for (const auto& [node, cls] : folders) {
    fs::create_directories(dir.path / node / "train" / cls);
    for (int i = 0; i < 3; ++i) {
      std::ofstream f((dir.path / node / "train" / cls / (std::to_string(i) + ".pgm")).string(),
                      std::ios::binary);
      f << "P5\n28 28\n255\n" << std::string(28 * 28, static_cast<char>(60 * i));
    }
  }
  std::ostringstream toml;
  toml << "[cluster]\nid = \"own-classes-refused\"\nbalancer = \"a\"\n"
       << "[data]\nformat = \"image-folder\"\n[train]\nepochs = 1\n"
       << "[storage]\ndir = \"" << (dir.path / "store").string() << "\"\n"
       << "[output]\ndir = \"" << (dir.path / "runs").string() << "\"\n";
  for (auto name : {"a", "b"})
    toml << "[[nodes]]\nname = \"" << name << "\"\nport = " << free_port() << "\ndata = \""
         << (dir.path / name).string() << "\"\n[[nodes.platforms]]\nname = \"p" << name << "\"\n";
  const auto config = (dir.path / "cluster.toml").string();
  write_file(config, toml.str());
  process a({EG_BINARY, "node", "--config", config, "--node", "a"},
            (dir.path / "a.log").string());
  auto [code, out] = run_binary({"node", "--config", config, "--node", "b"},
                                (dir.path / "b.log").string(), std::chrono::seconds(120));
  BOOST_TEST_INFO(out);
  BOOST_TEST(code == 2);
  BOOST_TEST(out.find("class 'Hat'") != std::string::npos);
  BOOST_TEST(out.find("the cluster's classes are node a's data's: Bag, Trouser") !=
             std::string::npos);
  a.signal(SIGKILL);
}
