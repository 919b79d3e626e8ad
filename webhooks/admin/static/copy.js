// The Endpoints page's copy buttons: shown only when a script runs (the URL beside each is
// selectable text without one), each copies its data-copy value.
for (const button of document.querySelectorAll("button[data-copy]")) {
  button.hidden = false;
  button.addEventListener("click", async () => {
    await navigator.clipboard.writeText(button.dataset.copy);
    button.textContent = "Copied";
  });
}
