package template

// DesktopName is the built-in template that carries a browser and a
// desktop: the debian template plus Chromium, an X server and a window
// manager.
const DesktopName = "desktop"

// DesktopDiskMiB is the desktop template's root filesystem size: its
// files take about 1.1 GB (Chromium and the X libraries add about 600 MiB
// to debian's 500); 2048 is the default sandbox disk, so a sandbox of the
// default size fits.
const DesktopDiskMiB = 2048

// DesktopPackages are what the desktop template adds to DebianPackages:
// Chromium's headless shell for `browser` (the DevTools protocol without
// the browser's own UI: it starts in a fraction of the full browser's time
// under TCG, and serves on the address it is told), the full Chromium for
// windows on the desktop, and for `desktop` a virtual X server, a light window manager (openbox), a
// terminal to open, input and screenshot tools, a VNC server for a live
// view and a font so pages and windows render text.
var DesktopPackages = []string{
	"chromium", "chromium-headless-shell", "xvfb", "xauth", "openbox", "xterm", "xdotool", "x11-utils", "x11vnc", "scrot", "fonts-dejavu-core",
}

// desktopHooks leave Chromium a profile folder the unprivileged user owns
// and keep it from asking for a keyring (there is none in a sandbox).
var desktopHooks = []string{
	`mkdir -p "$1/etc/chromium.d" && echo 'export CHROMIUM_FLAGS="$CHROMIUM_FLAGS --password-store=basic"' > "$1/etc/chromium.d/zeish"`,
}

// DesktopOptions say how to build the desktop template on top of base.
func DesktopOptions(base BaseOptions) DebianOptions {
	return DebianOptions{Base: base, Name: DesktopName, Extra: DesktopPackages, Hooks: desktopHooks, DiskMiB: DesktopDiskMiB}
}
