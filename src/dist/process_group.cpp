// DataParallelGroup over c10d: two ProcessGroupGloo on the process's GroupStore (FileStore / TCPStore):
// "cmd", whose only op is the followers' wait for rank 0's next command (unbounded, or three keepalives),
// and "data" (every other collective, with GroupOptions::timeout). Exceptions from c10d become Results.
#include "dist/process_group.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "common/log.h"
#include "engine/host_access.h"

namespace tinkerd::dist {

using engine::host_data;
using engine::host_value;
using engine::host_wrap;
using Gloo = c10d::ProcessGroupGloo;

struct GroupStore::Impl {
    c10::intrusive_ptr<c10d::Store> store;
    std::unique_ptr<StoreWatchdog> watchdog;
};

struct DataParallelGroup::State {
    GroupOptions options;
    c10::intrusive_ptr<Gloo> command_group;
    c10::intrusive_ptr<Gloo> data_group;
    std::string broken;  // why the group stopped working; empty while it works
    ReduceStats stats;
};

namespace {

constexpr std::chrono::hours NO_DEADLINE{24 * 365};

Result<c10::intrusive_ptr<c10d::Store>> open_store(const GroupOptions & o) {
    if (o.init.rfind("file://", 0) == 0) {
        // -1 workers: the file is never removed by a store's destructor (a restarted rank's would count
        // twice); the directory's owner removes it.
        auto store = c10::make_intrusive<c10d::FileStore>(o.init.substr(7), -1);
        store->setTimeout(o.timeout);
        return c10::intrusive_ptr<c10d::Store>(store);
    }
    if (o.init.rfind("tcp://", 0) == 0) {
        const std::string address = o.init.substr(6);
        const auto colon = address.rfind(':');
        const int port = colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
        if (colon == std::string::npos || port <= 0 || port > 65535) {
            return invalid_argument("--dist-init: expected tcp://HOST:PORT, got '" + o.init + "'");
        }
        c10d::TCPStoreOptions tcp;
        tcp.port = static_cast<uint16_t>(port);
        tcp.isServer = o.rank == 0;
        tcp.numWorkers = o.world_size;
        tcp.waitWorkers = false;
        tcp.timeout = o.timeout;
        return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::TCPStore>(address.substr(0, colon), tcp));
    }
    return invalid_argument("--dist-init must be file://PATH or tcp://HOST:PORT, got '" + o.init + "'");
}

// This machine's address on the route to `host` (a connected UDP socket sends nothing): the interface the
// other ranks reach, whatever the hostname resolves to (e.g. inside a network namespace).
std::string local_address_towards(const std::string & host) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo * found = nullptr;
    std::string address;
    if (getaddrinfo(host.c_str(), "9", &hints, &found) == 0 && found) {
        const int fd = socket(AF_INET, SOCK_DGRAM, 0);
        sockaddr_in mine{};
        socklen_t length = sizeof mine;
        char text[INET_ADDRSTRLEN] = {};
        if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr *>(&mine), &length) == 0 &&
            inet_ntop(AF_INET, &mine.sin_addr, text, sizeof text)) {
            address = text;
        }
        if (fd >= 0) {
            close(fd);
        }
        freeaddrinfo(found);
    }
    return address;
}

// Gloo binds to loopback for a file store, else to this machine's address on the route to rank 0.
std::shared_ptr<::gloo::transport::Device> make_device(const GroupOptions & o) {
    if (o.init.rfind("file://", 0) == 0) {
        return Gloo::createDeviceForHostname("127.0.0.1");
    }
    const std::string address = o.init.substr(6);
    const std::string mine = local_address_towards(address.substr(0, address.rfind(':')));
    return mine.empty() ? Gloo::createDefaultDevice() : Gloo::createDeviceForHostname(mine);
}

c10::intrusive_ptr<Gloo> make_group(const c10::intrusive_ptr<c10d::Store> & store, const GroupOptions & o,
                                    const std::string & name, std::chrono::milliseconds timeout) {
    auto gloo_options = Gloo::Options::create(timeout);
    gloo_options->devices.push_back(make_device(o));
    gloo_options->threads = 1;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(o.prefix + "/" + name, store);
    return c10::make_intrusive<Gloo>(prefixed, o.rank, o.world_size, gloo_options);
}

// An exception's message without Gloo's source location ("[/its/source/file.cc:123] Read error ...") and
// without anything after its first line.
std::string first_line(const std::string & what) {
    std::string reason = what.substr(0, what.find('\n'));
    if (!reason.empty() && reason[0] == '[' && reason.find("] ") != std::string::npos) {
        reason = reason.substr(reason.find("] ") + 2);
    }
    return reason;
}

// Runs one collective; an exception marks the group broken.
template <typename F>
Result<void> guarded(std::string & broken, const char * what, F && body) {
    if (!broken.empty()) {
        return internal_error("the data-parallel group is broken (" + broken + ")");
    }
    try {
        body();
        return {};
    } catch (const std::exception & e) {
        broken = std::string(what) + ": " + first_line(e.what());
        LOG_ERR("dist", "data-parallel %s failed: %s", what, broken.c_str());
        return internal_error("data-parallel " + broken);
    }
}

}  // namespace

Result<std::shared_ptr<GroupStore>> GroupStore::open(const GroupOptions & options) {
    try {
        auto store = open_store(options);
        if (!store.ok()) {
            return store.error();
        }
        auto impl = std::make_unique<Impl>();
        impl->store = *store;
        // A follower of a tcp:// store: a call twice the collective timeout long means rank 0 vanished
        // (a Gloo rendezvous may wait one timeout for its peers).
        const bool remote = options.rank > 0 && options.init.rfind("tcp://", 0) == 0;
        impl->watchdog =
            std::make_unique<StoreWatchdog>(remote ? 2 * options.timeout : std::chrono::milliseconds(0), options.init);
        return std::shared_ptr<GroupStore>(new GroupStore(std::move(impl)));
    } catch (const std::exception & e) {
        return internal_error("cannot reach the data-parallel store " + options.init + " (rank " +
                              std::to_string(options.rank) + "): " + first_line(e.what()));
    }
}

GroupStore::GroupStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GroupStore::~GroupStore() = default;

StoreWatchdog::Call GroupStore::watch() {
    return impl_->watchdog->call();
}

Result<void> GroupStore::set(const std::string & key, const std::string & value) {
    const auto watch = impl_->watchdog->call();
    try {
        impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
        return {};
    } catch (const std::exception & e) {
        return internal_error("data-parallel store: " + first_line(e.what()));
    }
}

Result<std::optional<std::string>> GroupStore::get(const std::string & key) {
    const auto watch = impl_->watchdog->call();
    try {
        if (!impl_->store->check({key})) {
            return std::optional<std::string>();
        }
        const auto bytes = impl_->store->get(key);
        return std::optional<std::string>(std::string(bytes.begin(), bytes.end()));
    } catch (const std::exception & e) {
        return internal_error("data-parallel store: " + first_line(e.what()));
    }
}

Result<std::unique_ptr<DataParallelGroup>> DataParallelGroup::join(GroupStore & store, const GroupOptions & options) {
    if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
        return invalid_argument("--rank must be in [0, --world-size)");
    }
    auto state = std::make_unique<State>();
    state->options = options;
    // Rank 0 only sends commands: a send that takes a collective timeout means a follower died without its
    // connection showing it (a killed sampling replica once left rank 0's send waiting for ever under load).
    // Followers wait for the next command, which may come days later: three keepalives, or no deadline.
    const auto command_timeout = options.rank == 0 ? options.timeout
                                 : options.keepalive.count() > 0
                                     ? std::chrono::milliseconds(3 * options.keepalive)
                                     : std::chrono::duration_cast<std::chrono::milliseconds>(NO_DEADLINE);
    try {  // data first: once it formed every rank is there, and cmd (maybe without a deadline) forms at once
        state->data_group = make_group(store.impl().store, options, "data", options.timeout);
        state->command_group = make_group(store.impl().store, options, "cmd", command_timeout);
    } catch (const std::exception & e) {
        return internal_error("cannot form the data-parallel group (rank " + std::to_string(options.rank) + " of " +
                              std::to_string(options.world_size) + ", " + options.prefix +
                              "): " + first_line(e.what()));
    }
    LOG_INF("dist", "rank %d of %d joined %s (%s)", options.rank, options.world_size, options.init.c_str(),
            options.prefix.c_str());
    return std::unique_ptr<DataParallelGroup>(new DataParallelGroup(std::move(state)));
}

DataParallelGroup::DataParallelGroup(std::unique_ptr<State> state) : state_(std::move(state)) {}
DataParallelGroup::~DataParallelGroup() = default;

int DataParallelGroup::rank() const {
    return state_->options.rank;
}
int DataParallelGroup::size() const {
    return state_->options.world_size;
}
const ReduceStats & DataParallelGroup::reduce_stats() const {
    return state_->stats;
}
bool DataParallelGroup::broken() const {
    return !state_->broken.empty();
}

Result<void> DataParallelGroup::send_command(int64_t op, const std::vector<uint8_t> & payload) {
    std::vector<at::Tensor> header{torch::tensor({op, static_cast<int64_t>(payload.size())}, torch::kInt64)};
    TRY_STATUS(guarded(state_->broken, "command", [&] { state_->command_group->broadcast(header)->wait(); }));
    // The root's buffer is only read by the broadcast, so the payload is sent in place (no copy).
    return broadcast_bytes(const_cast<std::vector<uint8_t> &>(payload));
}

Result<std::pair<int64_t, std::vector<uint8_t>>> DataParallelGroup::receive_command() {
    std::vector<at::Tensor> header{torch::zeros({2}, torch::kInt64)};
    TRY_STATUS(guarded(state_->broken, "command wait", [&] { state_->command_group->broadcast(header)->wait(); }));
    const int64_t * fields = host_data<const int64_t>(header[0], "receive_command");  // [op, payload bytes]
    std::vector<uint8_t> payload(static_cast<size_t>(fields[1]));
    TRY_STATUS(broadcast_bytes(payload));
    return std::make_pair(fields[0], std::move(payload));
}

Result<void> DataParallelGroup::broadcast_bytes(std::vector<uint8_t> & bytes) {
    return guarded(state_->broken, "broadcast", [&] {
        std::vector<at::Tensor> size{torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kInt64)};
        state_->data_group->broadcast(size)->wait();
        bytes.resize(static_cast<size_t>(host_value<int64_t>(size[0], "broadcast")));
        if (!bytes.empty()) {  // [n] uint8 over the vector itself: sent from it on rank 0, received into it elsewhere
            std::vector<at::Tensor> data{host_wrap(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8)};
            state_->data_group->broadcast(data)->wait();
        }
    });
}

Result<std::vector<std::vector<uint8_t>>> DataParallelGroup::gather_to_root(const std::vector<uint8_t> & mine) {
    const int world = size();
    std::vector<std::vector<uint8_t>> out;
    TRY_STATUS(guarded(state_->broken, "gather", [&] {
        std::vector<at::Tensor> my_size{torch::tensor({static_cast<int64_t>(mine.size())}, torch::kInt64)};
        std::vector<std::vector<at::Tensor>> sizes(1);
        for (int r = 0; r < world; ++r) {
            sizes[0].push_back(torch::zeros({1}, torch::kInt64));
        }
        state_->data_group->allgather(sizes, my_size)->wait();
        int64_t longest = 1;
        for (const auto & s : sizes[0]) {
            longest = std::max(longest, host_value<int64_t>(s, "gather"));
        }
        std::vector<at::Tensor> padded{torch::zeros({longest}, torch::kUInt8)};
        if (!mine.empty()) {
            std::memcpy(host_data<uint8_t>(padded[0], "gather"), mine.data(), mine.size());
        }
        std::vector<std::vector<at::Tensor>> gathered(rank() == 0 ? 1 : 0);
        for (int r = 0; rank() == 0 && r < world; ++r) {
            gathered[0].push_back(torch::zeros({longest}, torch::kUInt8));
        }
        c10d::GatherOptions gather_options;
        gather_options.rootRank = 0;
        state_->data_group->gather(gathered, padded, gather_options)->wait();
        for (int r = 0; rank() == 0 && r < world; ++r) {
            const uint8_t * p = host_data<const uint8_t>(gathered[0][r], "gather");
            out.emplace_back(p, p + host_value<int64_t>(sizes[0][r], "gather"));
        }
    }));
    return out;
}

Result<void> DataParallelGroup::all_reduce_sum(float * data, int64_t count) {
    const auto start = std::chrono::steady_clock::now();
    auto status = guarded(state_->broken, "all-reduce", [&] {
        std::vector<at::Tensor> buffer{host_wrap(data, {count}, torch::kFloat32)};  // [count], in place
        state_->data_group->allreduce(buffer)->wait();
    });
    state_->stats.calls += 1;
    state_->stats.bytes += count * static_cast<int64_t>(sizeof(float));
    state_->stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return status;
}

}  // namespace tinkerd::dist
