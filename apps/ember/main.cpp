// The ember command-line tool. Each command registers its flags (the add_*_command functions of
// the files beside this one) and calls the library; this file parses, runs the command that was
// asked for, and turns its errors into one clear line.
#include <CLI/CLI.hpp>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

#include "cli_util.h"
#include "ember/dist.h"
#include "ember/error.h"

namespace {

// The command a parse error belongs to ("train gpt"): the subcommands parsed so far.
std::string command_of(const CLI::App* app) {
  std::string command;
  for (const CLI::App* sub = app; !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    command += (command.empty() ? "" : " ") + sub->get_name();
  }
  return command.empty() ? "ember" : command;
}

// The innermost subcommand the user ran.
const CLI::App* innermost_command(const CLI::App* app) {
  while (!app->get_subcommands().empty()) app = app->get_subcommands().front();
  return app;
}

// The options given on the command line, as "--name value" (for a request that cannot be met:
// which of them asked for it).
std::string given_options(const CLI::App* command) {
  std::string out;
  for (const CLI::Option* option : command->get_options()) {
    if (option->count() == 0 || option->get_type_size() == 0 || option->get_name().rfind("--", 0) != 0) continue;
    for (const std::string& value : option->results())
      out += (out.empty() ? "" : ", ") + option->get_name() + " " + value;
  }
  return out;
}

// A word where a command is expected that names none ("ember talk", "ember train bert"): the
// message names the word and lists the commands. Empty when the words are fine (a missing command,
// options and the commands' own arguments are left to CLI11).
std::string unknown_command(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  std::string path = "ember";
  for (int i = 1;; ++i) {
    const std::vector<CLI::App*> subcommands = level->get_subcommands([](CLI::App*) { return true; });
    if (subcommands.empty()) return "";  // a command: its arguments follow
    std::string names;
    for (const CLI::App* sub : subcommands) names += (names.empty() ? "" : ", ") + sub->get_name();
    if (i >= argc) return "";  // CLI11: "A subcommand is required"
    const std::string_view word = argv[i];
    if (word.starts_with("-")) return "";  // --help, or an option CLI11 reports
    CLI::App* next = nullptr;
    for (CLI::App* sub : subcommands) next = sub->get_name() == word ? sub : next;
    if (next == nullptr) {
      return "[" + path + "] unknown command \"" + std::string(word) + "\"; the commands: " + names;
    }
    level = next;
    path = path == "ember" ? std::string(word) : path + " " + std::string(word);
  }
}

// Runs the parsed command; an error is one line on stderr (and ends a data-parallel job at once).
int run(const CLI::App& app, const ember::cli::Commands& commands) {
  const std::string command = command_of(&app);
  auto failed = [&] {
    // A rank of a data-parallel job may have a collective stuck in the communication library: end
    // at once (mpirun then stops the other ranks) instead of waiting for it at exit.
    if (commands.ddp) ember::dist::abort_job(1);
    return 1;
  };
  try {
    for (const ember::cli::Command& c : commands.list) {
      if (c.app->parsed()) return c.run();
    }
  } catch (const ember::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    // A request for more memory than the machine has (Note [what cannot be allocated]) comes from
    // the sizes the options asked for: say which were given.
    const std::string options = given_options(innermost_command(&app));
    if (std::string_view(e.what()).find("] cannot allocate ") != std::string_view::npos && !options.empty()) {
      std::cerr << "  (the options given: " << options << ")\n";
    }
    return failed();
  } catch (const std::exception& e) {
    // Memory outside tensors (a std::vector, a string) sized from the options or a file:
    // std::bad_alloc, or std::length_error for a size beyond what a vector can hold.
    const bool memory =
        dynamic_cast<const std::bad_alloc*>(&e) != nullptr || dynamic_cast<const std::length_error*>(&e) != nullptr;
    if (!memory) {
      // Never "terminate called": an exception that is not an ember::Error is a bug, reported as one.
      std::cerr << "error: [" << command << "] internal error (please report it): " << e.what() << "\n";
      return failed();
    }
    std::cerr << "error: [" << command << "] cannot allocate the memory this run asks for (" << e.what() << ")\n";
    const std::string options = given_options(innermost_command(&app));
    if (!options.empty()) std::cerr << "  (the options given: " << options << ")\n";
    return failed();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ember: a C++ tensor library with autograd, nn layers, optimizers and a fast CPU backend"};
  // Parse errors read as every other error: "[train gpt] --dim: must be ...". Set before the
  // subcommands are added: they copy it.
  app.failure_message([](const CLI::App* top, const CLI::Error& e) {
    return "error: [" + command_of(top) + "] " + e.what() + "\nRun with --help for more information.\n";
  });
  app.require_subcommand(1);
  ember::cli::Commands commands;
  ember::cli::add_info_command(app, commands);
  CLI::App* train = app.add_subcommand("train", "Train a model on real data");
  train->require_subcommand(1);
  ember::cli::add_train_mnist_command(*train, commands);
  ember::cli::add_train_text_commands(*train, commands);
  CLI::App* sample = app.add_subcommand("sample", "Draw samples from a generative model");
  sample->require_subcommand(1);
  ember::cli::add_diffusion_commands(*train, *sample, commands);
  ember::cli::add_generate_command(app, commands);
  ember::cli::add_chat_command(app, commands);
  ember::cli::add_serve_command(app, commands);
  ember::cli::add_bench_command(app, commands);
  ember::cli::add_embed_command(app, commands);
  ember::cli::add_quantize_command(app, commands);
  ember::cli::add_eval_commands(app, commands);
  ember::cli::add_roofline_command(app, commands);
  ember::cli::add_nas_command(app, commands);
  ember::cli::add_onnx_commands(app, commands);
  if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty()) {
    std::cerr << "error: " << unknown << "\nRun with --help for more information.\n";
    return static_cast<int>(CLI::ExitCodes::ExtrasError);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return run(app, commands);
}
