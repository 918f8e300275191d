// Follows /events: each "frame" replaces the panels' contents; "end" stops.
(function () {
  const status = document.getElementById("status");
  const es = new EventSource("events");
  es.addEventListener("frame", (e) => {
    const f = JSON.parse(e.data);
    for (const [id, html] of Object.entries(f.panels)) {
      const el = document.getElementById(id);
      if (el) el.innerHTML = html;
    }
    for (const [id, note] of Object.entries(f.notes)) {
      const el = document.getElementById(id + "-note");
      if (el) el.textContent = note;
    }
    status.textContent = f.status;
    document.body.dataset.version = f.v;
  });
  es.addEventListener("end", () => {
    es.close();
    document.body.dataset.ended = "true";
  });
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) status.textContent += " (disconnected)";
  };
})();
