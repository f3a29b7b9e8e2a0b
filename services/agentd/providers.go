package agentd

import (
	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/claude"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/codex"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/exec"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/opencode"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/script"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// providerFor returns the provider of a profile.
func providerFor(p config.Profile) (runtime.Provider, error) {
	switch p.Provider {
	case "exec":
		return exec.Provider{}, nil
	case "script":
		return script.Provider{}, nil
	case "codex":
		return codex.Provider{}, nil
	case "claude":
		return claude.Provider{}, nil
	case "opencode":
		return opencode.Provider{}, nil
	case "deepcode":
		return nativeProvider{}, nil
	}
	return nil, errs.New(errs.ProviderUnavailable, "provider %q is not available in this build", p.Provider)
}
