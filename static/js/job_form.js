// Show only the inputs for the chosen job kind (shape set or model file).
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
})();
