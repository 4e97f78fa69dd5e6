// The theme reads its light/dark mode from localStorage and logs a console error on a first visit,
// when none is stored yet; start such a visit in "auto" (follow the system), as the theme then does.
if (!document.documentElement.dataset.mode) {
  document.documentElement.dataset.mode = "auto";
}

// A lesson's "open in JupyterLab" link is relative to the JupyterLab that `make lab` starts, which serves
// this site at /static/ (book/lab.py). When the page comes from elsewhere (a file, another server),
// point the link at JupyterLab's default address instead and say so.
function labLinksToDefaultAddress(links) {
  links.forEach((link) => {
    link.href = link.dataset.fallback;
    link.title = "this page is not served by `make lab`: the link assumes JupyterLab at localhost:8888";
  });
}
document.addEventListener("DOMContentLoaded", () => {
  const links = document.querySelectorAll("a.rlbook-lab-link");
  if (!links.length) return;
  if (!/\/static\/lessons\/[^/]+$/.test(window.location.pathname)) {
    labLinksToDefaultAddress(links);
    return;
  }
  fetch(new URL("../../api", document.baseURI))
    .then((response) => response.json())
    .then((body) => { if (!body.version) throw new Error("not a Jupyter server"); })
    .catch(() => labLinksToDefaultAddress(links));
});

// Figures wider than the column are shown scaled: a click opens one at full size.
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".cell_output img").forEach((img) => {
    if (img.closest("a")) return;
    const scaled = () => img.naturalWidth > img.clientWidth * 1.05;
    img.addEventListener("click", () => { if (scaled()) window.open(img.src, "_blank"); });
    img.addEventListener("load", () => img.classList.toggle("rlbook-scaled", scaled()));
    if (img.complete) img.classList.toggle("rlbook-scaled", scaled());
  });
});

// A copy button on every code block (a lesson's cells, the API's examples and source).
function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const area = Object.assign(document.createElement("textarea"), { value: text });
  document.body.append(area);
  area.select();
  document.execCommand("copy");
  area.remove();
  return Promise.resolve();
}
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("div.highlight").forEach((block) => {
    const button = Object.assign(document.createElement("button"), {
      className: "rlbook-copy", type: "button", textContent: "copy", title: "copy this code" });
    button.addEventListener("click", () => copyText(block.querySelector("pre").innerText.replace(/\n$/, ""))
      .then(() => { button.textContent = "copied"; setTimeout(() => { button.textContent = "copy"; }, 1500); }));
    block.append(button);
  });
});
