// A blocking HTTP/1.1 client for the server tests (Boost.Beast): one request per connection, the whole response
// read (chunked bodies joined). No value when the connection fails or the response does not arrive in `timeout`.
#pragma once

// GCC 12 with the sanitizers warns that Beast's response parser may read an uninitialized boost::optional (a false
// positive; the server's request parser, the same template, does not trigger it).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace tracelm::testing {

struct HttpResponse {
    int status = 0;
    std::string body;
    std::map<std::string, std::string> headers;
    std::string header(const std::string& name) const {
        const auto it = headers.find(name);
        return it == headers.end() ? std::string() : it->second;
    }
};

inline std::optional<HttpResponse> http_request(int port, const std::string& method, const std::string& path,
                                                const std::string& body = "",
                                                const std::map<std::string, std::string>& headers = {},
                                                std::chrono::seconds timeout = std::chrono::seconds(60)) {
    namespace beast = boost::beast;
    namespace http = beast::http;
    boost::asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    beast::error_code ec;
    stream.expires_after(timeout);
    stream.socket().connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
    if (ec) return std::nullopt;
    http::request<http::string_body> req{http::string_to_verb(method), path, 11};
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) req.set(k, v);
    if (method == "POST") {
        req.set(http::field::content_type, "application/json");
        req.body() = body;
        req.prepare_payload();
    }
    req.keep_alive(false);
    http::write(stream.socket(), req, ec);
    if (ec) return std::nullopt;
    // The read timeout: an asynchronous read on the stream's timer, run to completion here.
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    bool done = false;
    http::async_read(stream, buffer, parser, [&](beast::error_code e, size_t) {
        ec = e;
        done = true;
    });
    ioc.run();
    if (!done || ec) return std::nullopt;
    HttpResponse r;
    const auto& res = parser.get();
    r.status = static_cast<int>(res.result_int());
    r.body = res.body();
    for (const auto& f : res) r.headers[std::string(f.name_string())] = std::string(f.value());
    return r;
}

}  // namespace tracelm::testing

#pragma GCC diagnostic pop
