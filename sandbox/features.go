package sandbox

import "slices"

// Features a template may carry (Template.Features) and a sandbox may
// switch on: the software is in the template's disk, so a sandbox of a
// template without it cannot have it.
const (
	FeatureBrowser = "browser" // Chromium, headless with the DevTools protocol
	FeatureDesktop = "desktop" // an X server, a window manager, input and screenshot tools
)

// Has reports whether the template carries feature f.
func (t Template) Has(f string) bool { return slices.Contains(t.Features, f) }

// WantedFeatures are the features a sandbox with these switches needs.
func WantedFeatures(browser, desktop bool) []string {
	var out []string
	if browser {
		out = append(out, FeatureBrowser)
	}
	if desktop {
		out = append(out, FeatureDesktop)
	}
	return out
}
