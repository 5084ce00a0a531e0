#pragma once
// Certificates made with `openssl req` for one test, in a folder removed after it.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

namespace sluice::test {

// A folder of certificates for one test, removed after it.
struct Certs {
  std::filesystem::path dir;
  Certs() {
    static int n = 0;
    dir = std::filesystem::temp_directory_path() /
          ("sluice-tls-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::create_directories(dir);
  }
  ~Certs() { std::filesystem::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }

  // A self-signed certificate (its own CA) for `cn` with DNS names and
  // addresses `sans` ("DNS:a.test,IP:127.0.0.1"); `days` -1: expired a day ago.
  // Writes NAME.pem and NAME.key; `rsa`: RSA 2048, else ECDSA P-256.
  void make(const std::string& name, const std::string& cn, const std::string& sans, int days = 2,
            bool rsa = false) const {
    std::vector<std::string> key =
        rsa ? std::vector<std::string>{"-newkey", "rsa:2048"}
            : std::vector<std::string>{"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"};
    if (days > 0) {
      std::vector<std::string> argv{"openssl", "req", "-x509"};
      argv.insert(argv.end(), key.begin(), key.end());
      for (auto a : {"-nodes", "-days"}) argv.emplace_back(a);
      argv.push_back(std::to_string(days));
      for (const auto& a :
           {std::string("-subj"), "/CN=" + cn, std::string("-addext"), "subjectAltName=" + sans,
            std::string("-keyout"), path(name + ".key"), std::string("-out"), path(name + ".pem")})
        argv.push_back(a);
      run_ok(argv);
      return;
    }
    std::vector<std::string> req{"openssl", "req", "-new"};
    req.insert(req.end(), key.begin(), key.end());
    for (const auto& a :
         {std::string("-nodes"), std::string("-subj"), "/CN=" + cn, std::string("-keyout"),
          path(name + ".key"), std::string("-out"), path(name + ".csr")})
      req.push_back(a);
    run_ok(req);
    run_ok({"openssl", "x509", "-req", "-in", path(name + ".csr"), "-key", path(name + ".key"),
            "-days", "-1", "-out", path(name + ".pem")});
  }
  // Several PEM files as one bundle.
  std::string bundle(const std::string& name, const std::vector<std::string>& parts) const {
    std::ofstream out(path(name));
    for (const auto& p : parts) out << std::ifstream(path(p + ".pem")).rdbuf();
    return path(name);
  }
  static void run_ok(const std::vector<std::string>& argv) {
    Process p(argv);
    auto code = p.wait_exit(std::chrono::seconds(30));
    if (code != 0) throw std::runtime_error(argv[0] + " " + argv[1] + " failed: " + p.err());
  }
};

}  // namespace sluice::test
