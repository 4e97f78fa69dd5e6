// The theme reads its light/dark mode from localStorage and logs a console error on a first visit,
// when none is stored yet; start such a visit in "auto" (follow the system), as the theme then does.
if (!document.documentElement.dataset.mode) {
  document.documentElement.dataset.mode = "auto";
}
