// `ember serve`: OpenAI's HTTP API (serve::Api) for a Llama-family GGUF model and, with
// --embedding-model, a MiniLM, over cpp-httplib. The work is in the library (ember/train/serve.h):
// this file maps HTTP to serve::Request/Response, streams the events, and drains on SIGTERM or
// SIGINT (a second signal ends at once).
#include "ember/train/serve.h"

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli_util.h"
#include "ember/models/chat.h"

namespace ember::cli {
namespace {

struct ServeOptions {
  std::string model = "data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";  // scripts/setup fetches it
  std::string embedding_model;  // a sentence-transformers folder or a GGUF file of one; empty: none
  std::string alias;            // the model's name in the API; empty: the file's name
  std::string host = "127.0.0.1";
  int port = 8080;
  serve::EngineOptions engine{};
  serve::ApiOptions api{};
  int64_t timeout = 30;  // seconds a connection may wait for the client's next bytes
  bool quiet = false;
  int threads = 0;
};

bool loopback(const std::string& host) { return host == "127.0.0.1" || host == "::1" || host == "localhost"; }

// The server's threads, limits and routes: every request goes to the Api, a stream's events are
// written as they come, and what httplib answers itself (a body over the limit, a malformed request
// line) gets an error object too.
void configure(httplib::Server& server, serve::Api& api, const ServeOptions& o) {
  // A thread per connection: every slot, every queued request, and room for the rest (health
  // checks, metrics, clients still sending their request).
  const auto connections = static_cast<size_t>(o.engine.parallel + o.engine.queue + 16);
  server.new_task_queue = [connections] { return new httplib::ThreadPool(connections); };
  server.set_payload_max_length(static_cast<size_t>(o.api.max_body_bytes));
  server.set_read_timeout(static_cast<time_t>(o.timeout));
  server.set_write_timeout(static_cast<time_t>(o.timeout));
  server.set_keep_alive_timeout(5);
  server.set_keep_alive_max_count(1000);
  server.set_tcp_nodelay(true);  // each streamed token goes out at once
  const auto handler = [&api](const httplib::Request& req, httplib::Response& res) {
    serve::Response r = api.handle({.method = req.method == "HEAD" ? "GET" : req.method,
                                    .path = req.path,
                                    .body = req.body,
                                    .authorization = req.get_header_value("Authorization")});
    res.status = r.status;
    for (const auto& [name, value] : r.headers) res.set_header(name, value);
    if (!r.stream) {
      res.set_content(r.body, r.content_type.c_str());
      return;
    }
    std::shared_ptr<serve::EventStream> stream = r.stream;
    res.set_chunked_content_provider(
        r.content_type,
        [stream](size_t, httplib::DataSink& sink) {
          std::string chunk;
          if (!stream->next(chunk)) {
            sink.done();
            return true;
          }
          if (!sink.write(chunk.data(), chunk.size())) {  // the client is gone: free its slot now
            stream->cancel();
            return false;
          }
          return true;
        },
        [stream](bool complete) {
          if (!complete) stream->cancel();
        });
  };
  const std::string any = ".*";  // every path and method: the Api routes, and answers 404 and 405 itself
  server.Get(any, handler);
  server.Post(any, handler);
  server.Put(any, handler);
  server.Patch(any, handler);
  server.Delete(any, handler);
  server.Options(any, handler);
  // What httplib answers itself (a body over the limit, a malformed request line): an error object.
  const int64_t max_body = o.api.max_body_bytes;
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([max_body](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = "the request is malformed";
        std::string code = "invalid_request";
        if (res.status == 413) {
          message = "the request body is larger than this server's limit of " + std::to_string(max_body) + " bytes";
          code = "request_too_large";
          res.status = 400;
        }
        nlohmann::json error = {
            {"error", {{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", code}}}};
        res.set_content(error.dump(), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  if (!o.quiet) {
    server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });
  }
}

int run_serve(ServeOptions& o) {
  use_threads(o.threads);
  // SIGTERM and SIGINT are waited for below, by this thread alone (the threads started from here
  // inherit the mask); a client that goes away must not end the process with SIGPIPE.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const auto load_start = Clock::now();
  models::LlamaFile llm = models::load_llama(o.model);
  std::shared_ptr<const models::SentenceEncoder> encoder;
  if (!o.embedding_model.empty()) {
    train::LoadedModel loaded =
        train::load_model(o.embedding_model, "serve",
                          {.kinds = {"minilm"}, .expected = "a sentence-transformers folder or a GGUF file of one"});
    encoder = std::make_shared<const models::SentenceEncoder>(std::move(*loaded.encoder));
    o.api.embedding_model_id = std::filesystem::path(o.embedding_model).filename().string();
  }
  o.api.model_id = o.alias.empty() ? std::filesystem::path(o.model).stem().string() : o.alias;
  serve::Engine engine(llm.model, o.engine);
  serve::Api api(engine, llm, o.api, encoder);

  httplib::Server server;
  configure(server, api, o);

  int port = o.port;
  if (o.port == 0) {
    port = server.bind_to_any_port(o.host);
  } else if (!server.bind_to_port(o.host, o.port)) {
    port = -1;
  }
  EMBER_CHECK(port > 0, "[serve] cannot listen on ", o.host, ":", o.port,
              " (in use, or not an address of this machine): give another --host or --port");
  if (!loopback(o.host) && o.api.api_key.empty()) {
    std::fprintf(stderr, "warning: listening on %s without --api-key: anyone who can reach it can use it\n",
                 o.host.c_str());
  }
  std::fprintf(stderr, "ember serve: %s (%d slots of %lld positions) in %.0f ms; listening on http://%s:%d\n",
               o.api.model_id.c_str(), o.engine.parallel, static_cast<long long>(o.engine.context),
               milliseconds_since(load_start), o.host.c_str(), port);
  std::fflush(stderr);

  bool listened = true;
  std::atomic<bool> stopping{false};
  std::thread listener([&] {
    listened = server.listen_after_bind();
    if (!stopping.load()) kill(getpid(), SIGTERM);  // the server stopped by itself: wake the wait below
  });
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  if (server.is_running()) {
    std::fprintf(stderr, "ember serve: %s: finishing the requests in flight (again to stop at once)\n",
                 signal_number == SIGINT ? "SIGINT" : "SIGTERM");
    std::thread([signals] {
      int again = 0;
      sigwait(&signals, &again);
      std::fprintf(stderr, "ember serve: stopped\n");
      std::_Exit(1);
    }).detach();
    engine.drain();
  }
  stopping.store(true);
  server.stop();
  listener.join();
  std::fprintf(stderr, "ember serve: stopped\n");
  return listened ? 0 : 1;
}

}  // namespace

void add_serve_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "An OpenAI-compatible HTTP server: chat, completions and embeddings, many clients decoding together");
  cmd->add_option("--model", o->model, "A Llama-family GGUF file")->capture_default_str();
  cmd->add_option("--embedding-model", o->embedding_model,
                  "A sentence-transformers folder (data/minilm) or a GGUF file of one, for /v1/embeddings");
  cmd->add_option("--alias", o->alias, "The model's name in the API (default: the file's name)");
  cmd->add_option("--host", o->host, "The address to listen on (loopback unless told otherwise)")
      ->capture_default_str();
  cmd->add_option("--port", o->port, "The port to listen on (0: any free one, printed)")
      ->check(count_in(0, 65535))
      ->capture_default_str();
  cmd->add_option("--parallel", o->engine.parallel, "Sequences that decode together, each in its own slot")
      ->check(count_in(1, 256))
      ->capture_default_str();
  cmd->add_option("--context", o->engine.context, "Positions per slot: a request's prompt and reply must fit")
      ->check(count_in(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--queue", o->engine.queue, "Requests that may wait for a slot; more are answered 503")
      ->check(count_in(0, 4096))
      ->capture_default_str();
  cmd->add_option("--prompt-chunk", o->engine.prompt_chunk,
                  "Prompt tokens processed per step while others generate (each step waits for one chunk)")
      ->check(count_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--prompt-chunk-alone", o->engine.prompt_chunk_alone,
                  "Prompt tokens processed per step while no other sequence generates")
      ->check(count_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--api-key", o->api.api_key, "Require \"Authorization: Bearer KEY\" on every request");
  cmd->add_option("--max-body", o->api.max_body_bytes, "The largest request body, in bytes")
      ->check(count_in(1024, 1LL << 30))
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "Seconds a connection may wait for the client's next bytes")
      ->check(count_in(1, 3600))
      ->capture_default_str();
  cmd->add_flag("--quiet", o->quiet, "Do not log each request to stderr");
  add_threads(cmd, o->threads);
  commands.add(cmd, [o] { return run_serve(*o); });
}

}  // namespace ember::cli
