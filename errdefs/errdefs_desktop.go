package errdefs

// Codes of the desktop actions (guest/desktop). They live in their own file
// so the desktop work stays out of the main list's way; All and ByCode see
// them like any other.
var (
	ErrDesktopNotEnabled = def("desktop_not_enabled", ClassInvalid, "The sandbox has no desktop: create or fork it with desktop: true, from a template that has one.")
	ErrOffScreen         = def("off_screen", ClassInvalid, "A desktop action's coordinates are outside the screen.")
)
