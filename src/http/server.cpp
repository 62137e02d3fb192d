// Server: binds the listening socket, runs the Asio event loop on `io_threads` threads, accepts
// connections (one Session each, on its own strand; at max_connections the one waiting longest for a
// request header is closed to make room), and stops everything on stop(). The per-connection protocol lives in
// connection.cpp.

#include "http/server.h"

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <sys/resource.h>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "http/connection.h"

namespace tinkerd::http {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr auto ACCEPT_RETRY_DELAY = std::chrono::milliseconds(100);

// Descriptors kept free for everything but connections (SQLite and its WAL, checkpoint and archive files,
// model files, logs): a tenth of the open-file limit, at least 256.
constexpr rlim_t MIN_RESERVED_FDS = 256;

// Lifts the soft open-file limit to the hard one (thousands of connections need more than the usual 1024)
// and returns the limit in force (0 when unknown) and the one before.
std::pair<rlim_t, rlim_t> raise_open_file_limit() {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
        return {0, 0};
    }
    const rlim_t old_soft = limit.rlim_cur;
    if (limit.rlim_cur >= limit.rlim_max) {
        return {limit.rlim_cur, old_soft};
    }
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
        LOG_WRN("http", "cannot raise the open-file limit from %llu: %s", static_cast<unsigned long long>(old_soft),
                std::strerror(errno));
        return {old_soft, old_soft};
    }
    return {limit.rlim_cur, old_soft};
}

// The connection cap: the configured one, lowered so that connections never take the descriptors the rest
// of the process needs.
size_t connection_cap(size_t configured, rlim_t fd_limit, rlim_t & reserved) {
    if (fd_limit == 0 || fd_limit == RLIM_INFINITY) {
        reserved = 0;
        return configured;
    }
    reserved = std::max(MIN_RESERVED_FDS, fd_limit / 10);
    const rlim_t available = fd_limit > 2 * reserved ? fd_limit - reserved : fd_limit / 2;
    return static_cast<size_t>(std::min<rlim_t>(configured, std::max<rlim_t>(available, 1)));
}

Result<net::ip::address> resolve_host(net::io_context & io, const std::string & host) {
    boost::system::error_code ec;
    net::ip::address address = net::ip::make_address(host, ec);
    if (!ec) {
        return address;
    }
    tcp::resolver resolver(io);
    auto results = resolver.resolve(host, "", ec);
    if (ec || results.empty()) {
        return internal_error("cannot resolve the listen host '" + host + "': " + ec.message());
    }
    return results.begin()->endpoint().address();
}

}  // namespace

struct Server::Impl {
    explicit Impl(ServerOptions options, Handler handler)
        : context(std::make_shared<ServerContext>()), io(std::max(1, options.io_threads)) {
        context->options = std::move(options);
        context->handler = std::move(handler);
    }

    Result<void> listen();
    void accept_next();
    void on_accept(const boost::system::error_code & ec, tcp::socket socket);
    void admit(tcp::socket socket);
    void stop();

    std::shared_ptr<ServerContext> context;
    net::io_context io;  // declared before the I/O objects below, so it is destroyed after them
    tcp::acceptor acceptor{io};
    net::steady_timer accept_retry_timer{io};
    std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
    std::vector<std::thread> threads;
    int bound_port = 0;
    std::mutex state_mutex;  // guards started/stopped
    bool started = false;
    bool stopped = false;
};

Result<void> Server::Impl::listen() {
    const ServerOptions & options = context->options;
    const std::string where = options.host + ":" + std::to_string(options.port);
    auto address = resolve_host(io, options.host);
    if (!address.ok()) {
        return address.error();
    }
    tcp::endpoint endpoint(*address, static_cast<unsigned short>(options.port));
    boost::system::error_code ec;
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) {
        acceptor.set_option(net::socket_base::reuse_address(true), ec);
    }
    if (!ec) {
        acceptor.bind(endpoint, ec);
    }
    if (!ec) {
        acceptor.listen(net::socket_base::max_listen_connections, ec);
    }
    if (!ec) {
        bound_port = acceptor.local_endpoint(ec).port();
    }
    if (ec) {
        boost::system::error_code ignored;
        acceptor.close(ignored);
        return internal_error("cannot listen on " + where + ": " + ec.message());
    }
    return {};
}

void Server::Impl::accept_next() {
    acceptor.async_accept(net::make_strand(io), [this](const boost::system::error_code & ec, tcp::socket socket) {
        on_accept(ec, std::move(socket));
    });
}

void Server::Impl::on_accept(const boost::system::error_code & ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) {
        return;
    }
    if (ec) {
        // Out of file descriptors anyway (files took them): free one from a connection that sent nothing and
        // accept again at once; otherwise wait a little instead of spinning on the error.
        if ((ec == net::error::no_descriptors || ec.value() == ENFILE) && context->evict_one()) {
            LOG_WRN("http", "accept failed (%s): closed the connection waiting longest for a request",
                    ec.message().c_str());
            return net::post(io, [this] { accept_next(); });
        }
        LOG_WRN("http", "accept failed: %s", ec.message().c_str());
        accept_retry_timer.expires_after(ACCEPT_RETRY_DELAY);
        accept_retry_timer.async_wait([this](const boost::system::error_code & wait_ec) {
            if (!wait_ec) {
                accept_next();
            }
        });
        return;
    }
    admit(std::move(socket));
    accept_next();
}

void Server::Impl::admit(tcp::socket socket) {
    const uint64_t id = context->next_session_id++;
    auto session = std::make_shared<Session>(std::move(socket), context, id);
    if (!context->add_session(id, session)) {
        LOG_WRN("http",
                "connection limit of %zu reached, every connection busy with a request (or stopping): "
                "closing a new connection",
                context->max_connections);
        session->close();
        return;
    }
    net::dispatch(session->executor(), [session] { session->start(); });
}

void Server::Impl::stop() {
    std::lock_guard state_lock(state_mutex);
    if (stopped || !started) {
        stopped = true;
        return;
    }
    stopped = true;
    std::vector<std::shared_ptr<Session>> open_sessions;
    {
        // From here on Respond callbacks do nothing, and no new session is added.
        std::lock_guard lock(context->mutex);
        context->stopped = true;
        for (auto & [id, session] : context->sessions) {
            open_sessions.push_back(session);
        }
        context->sessions.clear();
    }
    work.reset();
    io.stop();
    for (std::thread & thread : threads) {
        if (thread.get_id() == std::this_thread::get_id()) {
            thread.detach();  // stop() called from a handler: cannot join ourselves
        } else if (thread.joinable()) {
            thread.join();
        }
    }
    threads.clear();
    // No I/O thread runs any more, so the sockets can be closed from here.
    boost::system::error_code ignored;
    acceptor.close(ignored);
    accept_retry_timer.cancel();
    for (auto & session : open_sessions) {
        session->close();
    }
    LOG_INF("http", "stopped; closed %zu open connections", open_sessions.size());
}

Server::Server(ServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

Server::~Server() {
    stop();
}

Result<void> Server::start() {
    std::lock_guard state_lock(impl_->state_mutex);
    if (impl_->started || impl_->stopped) {
        return internal_error("the HTTP server was already started");
    }
    const auto [fd_limit, old_fd_limit] = raise_open_file_limit();
    rlim_t reserved = 0;
    ServerContext & context = *impl_->context;
    context.max_connections = connection_cap(context.options.max_connections, fd_limit, reserved);
    LOG_INF("http",
            "open-file limit %llu (was %llu); at most %zu connections (--max-connections %zu, %llu descriptors "
            "kept for files); request header timeout %d s, body timeout %d s",
            static_cast<unsigned long long>(fd_limit), static_cast<unsigned long long>(old_fd_limit),
            context.max_connections, context.options.max_connections, static_cast<unsigned long long>(reserved),
            context.options.header_timeout_seconds, context.options.body_timeout_seconds);
    TRY_STATUS(impl_->listen());
    impl_->started = true;
    impl_->accept_next();
    impl_->work.emplace(impl_->io.get_executor());
    const int thread_count = std::max(1, impl_->context->options.io_threads);
    for (int i = 0; i < thread_count; ++i) {
        impl_->threads.emplace_back([io = &impl_->io] { io->run(); });
    }
    LOG_INF("http", "listening on %s:%d with %d I/O threads", impl_->context->options.host.c_str(), impl_->bound_port,
            thread_count);
    return {};
}

int Server::port() const {
    return impl_->bound_port;
}

size_t Server::max_connections() const {
    std::lock_guard lock(impl_->context->mutex);
    return impl_->context->max_connections;
}

void Server::stop() {
    impl_->stop();
}

}  // namespace tinkerd::http
