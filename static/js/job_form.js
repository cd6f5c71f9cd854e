// Show only the inputs for the chosen job kind (shape set or model file), and refuse a file
// over its own limit before sending it: past the server's cap the form never sees the request
// to say which limit applies (issue 27).
(function () {
  "use strict";
  const radios = document.querySelectorAll('input[name="kind"]');
  function update() {
    const chosen = document.querySelector('input[name="kind"]:checked');
    document.querySelectorAll(".panel[data-kind]").forEach(function (panel) {
      panel.hidden = chosen && panel.dataset.kind !== chosen.value;
    });
  }
  radios.forEach(function (r) { r.addEventListener("change", update); });
  update();

  function sizeText(bytes) {
    return bytes >= 1048576 ? (bytes / 1048576).toFixed(1) + " MB" : Math.ceil(bytes / 1024) + " KB";
  }
  function tooLarge(input) {
    const file = input.files && input.files[0];
    const field = input.closest(".field");
    let errors = field.querySelector("ul.errors.too-large");
    if (!file || file.size <= Number(input.dataset.maxBytes)) {
      if (errors) errors.remove();
      if (!field.querySelector("ul.errors")) field.classList.remove("has-error");
      return false;
    }
    if (!errors) {
      errors = document.createElement("ul");
      errors.className = "errors too-large";
      errors.setAttribute("role", "alert");
      field.appendChild(errors);
    }
    errors.replaceChildren(document.createElement("li"));
    errors.firstChild.textContent = file.name + " is " + sizeText(file.size) + "; the limit is " + input.dataset.maxText + ".";
    field.classList.add("has-error");
    return true;
  }
  const files = document.querySelectorAll("input[type=file][data-max-bytes]");
  files.forEach(function (input) {
    input.addEventListener("change", function () { tooLarge(input); });
  });
  const form = files.length ? files[0].form : null;
  if (form) {
    form.addEventListener("submit", function (event) {
      // Every file input: the browser sends a hidden panel's file too.
      let refused = false;
      files.forEach(function (input) { refused = tooLarge(input) || refused; });
      if (refused) event.preventDefault();
    });
  }
})();
