package sandbox

// BrowserPort is where a sandbox's browser serves the DevTools protocol in
// the guest (on every address: the data plane reaches it over the
// sandbox's network link).
const BrowserPort = 9222

// BrowserUser is the guest account the browser runs as (the debian-derived
// templates' unprivileged user).
const BrowserUser = "user"
