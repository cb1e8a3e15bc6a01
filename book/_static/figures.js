// Figure behaviour in the book (see _config.yml): a plot in a cell's output opens at its
// full size when clicked, because the column shows a wide figure smaller than it was drawn.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".cell_output img").forEach(function (img) {
    if (img.closest("a") || img.closest(".widget-image, .jupyter-widgets")) return;
    var link = document.createElement("a");
    link.href = img.src;
    link.target = "_blank";
    link.className = "figure-full-size";
    link.title = "Open the figure at full size";
    img.parentNode.insertBefore(link, img);
    link.appendChild(img);
  });
});
