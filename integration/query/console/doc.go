// Package console tests the web console in headless chromium against a
// real hub, saving screenshots of its views as CI artifacts.
package console
