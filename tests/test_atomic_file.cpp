// Atomic writes (base/atomic_file.h, Note [temporary files]): the temporary files a killed writer
// leaves are removed by the next write of the same path, while a live writer's (locked) file and
// the user's files of similar names are left alone; the profiler's trace is written atomically
// too, and its failures name the path and the reason.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/profiler.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using test_util::expect_error;

class AtomicFileTest : public test_util::TempFolderTest {
 protected:
  void touch(const std::string& name, const std::string& bytes = "partial") {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  std::string read(const std::string& name) {
    std::ifstream in(path(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::vector<std::string> names() const {
    std::vector<std::string> all;
    for (const auto& entry : fs::directory_iterator(dir_)) all.push_back(entry.path().filename().string());
    std::sort(all.begin(), all.end());
    return all;
  }
};

TEST_F(AtomicFileTest, TheNextWriteRemovesTheTemporaryFilesOfKilledWriters) {
  touch(".ckpt.safetensors.tmp.4242.0");  // as a writer killed mid-write leaves them: no lock held
  touch(".ckpt.safetensors.tmp.77.13");
  // Names that are not temporary files of ckpt.safetensors: the user's, or another path's.
  touch(".ckpt.safetensors.tmp.notes");
  touch(".ckpt.safetensors.tmp.1.2.bak");
  touch("ckpt.safetensors.tmp.1.2");
  touch(".other.safetensors.tmp.1.2");
  save({{"w", arange(0, 4, 1, kFloat32)}}, path("ckpt.safetensors"));
  EXPECT_EQ(names(),
            (std::vector<std::string>{".ckpt.safetensors.tmp.1.2.bak", ".ckpt.safetensors.tmp.notes",
                                      ".other.safetensors.tmp.1.2", "ckpt.safetensors", "ckpt.safetensors.tmp.1.2"}));
  EXPECT_EQ(load(path("ckpt.safetensors")).at("w").to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
}

TEST_F(AtomicFileTest, ALiveWritersTemporaryFileIsLeftAlone) {
  // A writer in the middle of its write holds a lock on its temporary file.
  const std::string live = ".model.gguf.tmp.99.0";
  touch(live);
  const detail::FileDescriptor held(::open(path(live).c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_GE(held.get(), 0);
  ASSERT_EQ(::flock(held.get(), LOCK_EX | LOCK_NB), 0);
  save_bytes(path("model.gguf"), "new", "quantize");
  EXPECT_EQ(names(), (std::vector<std::string>{live, "model.gguf"}));
  EXPECT_EQ(read(live), "partial");
  // Once its writer is gone (here: the lock dropped), the next write removes it.
  ASSERT_EQ(::flock(held.get(), LOCK_UN), 0);
  save_bytes(path("model.gguf"), "newer", "quantize");
  EXPECT_EQ(names(), std::vector<std::string>{"model.gguf"});
  EXPECT_EQ(read("model.gguf"), "newer");
}

TEST_F(AtomicFileTest, AnOpenAtomicFileIsNotRemovedByAnotherWriteOfTheSamePath) {
  detail::AtomicFile first(path("out.npy"), "save_npy");
  first.write("first", 5);
  save_bytes(path("out.npy"), "second", "save_npy");  // sweeps: must not take first's file
  first.commit();
  EXPECT_EQ(read("out.npy"), "first");
  EXPECT_EQ(names(), std::vector<std::string>{"out.npy"});
}

TEST_F(AtomicFileTest, TemporaryFilesAreNamedAfterThePathAndHidden) {
  detail::AtomicFile file(path("trace.json"), "export_chrome_trace");
  const std::vector<std::string> during = names();
  ASSERT_EQ(during.size(), 1u);
  const std::string prefix = ".trace.json.tmp." + std::to_string(::getpid()) + ".";
  EXPECT_EQ(during[0].substr(0, prefix.size()), prefix) << during[0];
  file.write("{}", 2);
  file.commit();
  EXPECT_EQ(names(), std::vector<std::string>{"trace.json"});
}

TEST_F(AtomicFileTest, TheProfilersTraceIsWrittenAtomically) {
  profiler::Profiler prof;
  for (int i = 0; i < 50; ++i) (ones({8, 8}) + 1).sum().item<double>();
  prof.stop();
  touch("trace.json", "the previous trace");
  touch(".trace.json.tmp.31337.0");  // a trace export killed mid-write
  prof.export_chrome_trace(path("trace.json"));
  EXPECT_EQ(names(), std::vector<std::string>{"trace.json"});
  EXPECT_NE(read("trace.json").find("\"traceEvents\""), std::string::npos);

  // Failures name the path and the reason, and leave the previous trace as it was.
  const std::string before = read("trace.json");
  fs::create_directory(path("folder.json"));
  expect_error([&] { prof.export_chrome_trace(path("folder.json")); },
               {"[export_chrome_trace] cannot write '" + path("folder.json") + "'", "renaming", "over it failed"});
  expect_error(
      [&] { prof.export_chrome_trace(path("missing/trace.json")); },
      {"[export_chrome_trace] cannot write '" + path("missing/trace.json") + "'", "No such file or directory"});
  const std::string message = test_util::error_on_a_full_disk([&] { prof.export_chrome_trace(path("trace.json")); });
  ASSERT_GT(before.size(), 4096u);  // past the limit error_on_a_full_disk sets
  EXPECT_NE(message.find("[export_chrome_trace] writing '" + path("trace.json") + "' failed"), std::string::npos)
      << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_EQ(read("trace.json"), before);
  EXPECT_EQ(names(), (std::vector<std::string>{"folder.json", "trace.json"}));
}

}  // namespace
}  // namespace ember
