// O_DIRECT chunked parallel reads into an anonymous page-aligned mapping.
#include "io/direct_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/timer.h"

namespace ft {

namespace {
constexpr size_t k_page = 4096;
size_t round_up(size_t n) { return (n + k_page - 1) / k_page * k_page; }
}  // namespace

HostBuffer::HostBuffer(size_t bytes) : size_(bytes) {
  const size_t n = round_up(std::max<size_t>(bytes, 1));
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail("cannot map {:.2f} GiB of host memory: {}", static_cast<double>(n) / (1 << 30),
         std::strerror(errno));
  ::madvise(p, n, MADV_HUGEPAGE);  // fewer TLB misses over multi-GB weights; advisory only
  data_ = static_cast<char*>(p);
}

HostBuffer::~HostBuffer() {
  if (data_) ::munmap(data_, round_up(std::max<size_t>(size_, 1)));
}

DirectReadStats read_file_direct(const std::string& path, char* dst, size_t n,
                                 const std::function<void(size_t)>& progress, int threads,
                                 size_t chunk) {
  FT_CHECK(reinterpret_cast<uintptr_t>(dst) % k_page == 0 && chunk % k_page == 0,
           "read_file_direct: buffer and chunk must be 4 KiB aligned");
  DirectReadStats st;
  st.bytes = n;
  Timer timer;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  st.direct = fd >= 0;
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // e.g. tmpfs: EINVAL
  if (fd < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  const size_t total = round_up(n), n_chunks = (total + chunk - 1) / chunk;
  std::atomic<size_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::atomic<int> running{0};
  auto worker = [&] {
    for (size_t c; !failed && (c = next.fetch_add(1)) < n_chunks;) {
      size_t off = c * chunk;
      const size_t end = std::min(total, off + chunk);
      while (off < end) {
        const ssize_t r = ::pread(fd, dst + off, end - off, static_cast<off_t>(off));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {  // a short file ends the reads; n beyond it is an error below
          if (r < 0 && !failed.exchange(true)) error = std::strerror(errno);
          break;
        }
        off += static_cast<size_t>(r);
        done += static_cast<size_t>(r);
      }
      if (off < end && off < n && !failed.exchange(true) && error.empty())
        error = "the file ends early";
    }
    --running;
  };
  const int nt = std::max(1, std::min<int>(threads, static_cast<int>(n_chunks)));
  std::vector<std::thread> pool;
  running = nt;
  for (int i = 0; i < nt; ++i) pool.emplace_back(worker);
  while (running > 0) {
    if (progress) progress(std::min(n, done.load()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : pool) t.join();
  ::close(fd);
  if (failed) fail("cannot read {} ({} of {} bytes): {}", path, done.load(), n, error);
  if (progress) progress(n);
  st.seconds = timer.seconds();
  return st;
}

}  // namespace ft
