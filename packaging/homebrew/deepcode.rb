# Homebrew formula for deepcode. Copy it into a tap (Formula/deepcode.rb) and
# set url and sha256 to a release tarball; `brew install --HEAD` builds main.
class Deepcode < Formula
  desc "Coding agents in a per-user background service"
  homepage "https://github.com/deepcode-dev/deepcode"
  url "https://github.com/deepcode-dev/deepcode/archive/refs/tags/v0.1.0.tar.gz"
  # Fill in with `shasum -a 256` of the release tarball.
  sha256 "0000000000000000000000000000000000000000000000000000000000000000"
  license "Apache-2.0"
  head "https://github.com/deepcode-dev/deepcode.git", branch: "main"

  depends_on "go" => :build

  # The services, and tui: deepcode-tui, the TUI with its Markdown
  # renderer, which deepcode runs from beside itself.
  SERVICES = %w[manager gateway supervisor agentd termhost scheduler tui].freeze

  def install
    ENV["CGO_ENABLED"] = "0"
    ldflags = "-s -w -X github.com/deepcode-dev/deepcode/shared/buildinfo.Version=#{version}"
    # The CLI and the services live together in libexec/deepcode. bin/deepcode
    # is a launcher that runs them through the formula's opt path, which
    # stays the same across upgrades: the path `deepcode service install
    # --at-login` records in the LaunchAgent keeps working after
    # `brew upgrade` (a Cellar path would not).
    system "go", "build", *std_go_args(ldflags: ldflags, output: libexec/"deepcode/deepcode"), "./cmd/deepcode"
    SERVICES.each do |s|
      system "go", "build", *std_go_args(ldflags: ldflags, output: libexec/"deepcode/deepcode-#{s}"), "./cmd/deepcode-#{s}"
    end
    (bin/"deepcode").write_env_script opt_libexec/"deepcode/deepcode", DEEPCODE_LIBEXEC: opt_libexec/"deepcode"
    generate_completions_from_executable(bin/"deepcode", "completion")
    on_linux do
      (lib/"systemd/user").install Dir["units/*.{target,socket,service}"]
    end
    doc.install "README.md"
  end

  def caveats
    <<~EOS
      deepcode does not start at login by itself. To run it in the background
      for this user and database, and at every login:
        deepcode service install --at-login
        deepcode service start
    EOS
  end

  test do
    assert_match version.to_s, shell_output("#{bin}/deepcode --version")
    ENV["DEEPCODE_HOME"] = (testpath/"home").to_s
    system bin/"deepcode", "service", "start", "--port", "0"
    system bin/"deepcode", "service", "status"
    system bin/"deepcode", "service", "stop"
  end
end
