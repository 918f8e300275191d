// Follows /events. A "frame" holds only the panels that changed since the
// page's last frame (the server tracks it by event id); they are patched
// into the page in place: the new markup is parsed off-document and only
// the attributes and text that differ are written, so the browser restyles
// and repaints only what changed. Frames are applied at most once per
// animation frame, and not at all while the tab is hidden (browsers pause
// animation frames there): the latest of each panel waits, and is shown
// when the tab is. "end" stops.
(function () {
  const body = document.body;
  const status = document.getElementById("status");
  const tpl = document.createElement("template");
  let panels = {}, notes = {}, text = null, version = null;
  let scheduled = false, ended = false;

  const es = new EventSource("events?since=" + encodeURIComponent(body.dataset.since || ""));
  es.addEventListener("frame", (e) => {
    const f = JSON.parse(e.data);
    Object.assign(panels, f.panels);
    Object.assign(notes, f.notes);
    text = f.status;
    version = f.v;
    schedule();
  });
  es.addEventListener("end", () => {
    es.close();
    ended = true;
    schedule();
  });
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) status.textContent += " (disconnected)";
  };

  function schedule() {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(apply);
    }
  }

  function apply() {
    scheduled = false;
    for (const [id, html] of Object.entries(panels)) {
      const el = document.getElementById(id);
      if (el) patch(el, html);
    }
    for (const [id, note] of Object.entries(notes)) {
      const el = document.getElementById(id + "-note");
      if (el && el.textContent !== note) el.textContent = note;
    }
    if (text !== null && status.textContent !== text) status.textContent = text;
    if (version !== null) body.dataset.version = version;
    panels = {};
    notes = {};
    text = version = null;
    if (ended) body.dataset.ended = "true";
  }

  // patch makes el's children those of html, reusing its nodes.
  function patch(el, html) {
    tpl.innerHTML = html;
    morphChildren(el, tpl.content);
    tpl.innerHTML = "";
  }

  function morphChildren(to, from) {
    const want = Array.from(from.childNodes);
    const have = to.childNodes;
    want.forEach((n, i) => {
      if (i < have.length) morph(have[i], n);
      else to.appendChild(n);
    });
    while (have.length > want.length) to.removeChild(to.lastChild);
  }

  function morph(o, n) {
    if (o.nodeType !== n.nodeType || o.nodeName !== n.nodeName) {
      o.replaceWith(n);
      return;
    }
    if (o.nodeType !== Node.ELEMENT_NODE) {
      if (o.nodeValue !== n.nodeValue) o.nodeValue = n.nodeValue;
      return;
    }
    for (const a of n.attributes) {
      if (o.getAttribute(a.name) !== a.value) o.setAttribute(a.name, a.value);
    }
    for (const a of Array.from(o.attributes)) {
      if (!n.hasAttribute(a.name)) o.removeAttribute(a.name);
    }
    morphChildren(o, n);
  }
})();
