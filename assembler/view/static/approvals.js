// capsem view: the banner of requests an `ask` rule holds, on every page, with Approve and Deny.
// It polls /approvals.json; a button POSTs the answer with this server's token (x-capsem-token).
(function () {
  "use strict";
  var box = document.getElementById("approvals");
  var meta = document.querySelector('meta[name="capsem-token"]');
  if (!box || !meta) { return; }
  var token = meta.getAttribute("content");
  var notes = {};  // id -> what happened to it, shown until the next listing drops it

  var el = function (tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  };

  var answer = function (item, decision, row) {
    var always = row.querySelector("input[type=checkbox]").checked;
    var reason = row.querySelector("input[type=text]").value;
    row.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    fetch("/approvals/" + encodeURIComponent(item.id), {
      method: "POST",
      headers: { "content-type": "application/json", "x-capsem-token": token },
      body: JSON.stringify({ decision: decision, always: always, reason: reason }),
    }).then(function (r) { return r.json().then(function (body) { return [r.ok, body]; }); })
      .then(function (res) {
        notes[item.id] = res[0] ? (decision === "approve" ? "approved" : "denied") : (res[1].error || "failed");
        poll(true);
      }).catch(function () { notes[item.id] = "failed"; poll(true); });
  };

  var render = function (waiting) {
    box.textContent = "";
    if (!waiting.length) { box.hidden = true; return; }
    box.hidden = false;
    box.appendChild(el("strong", "approvals-title",
      waiting.length === 1 ? "1 request waits for you" : waiting.length + " requests wait for you"));
    waiting.forEach(function (item) {
      var row = el("div", "approval");
      row.setAttribute("data-id", item.id);
      var what = el("div", "approval-what");
      what.appendChild(el("span", "badge warn", item.rule));
      what.appendChild(el("span", "mono", " " + item.target));
      what.appendChild(el("span", "muted small", " · " + item.process + " · waiting " + Math.round(item.waiting_s) +
        " s · session " + item.session_id + " · " + item.id));
      row.appendChild(what);
      if (item.arguments) {
        var args = typeof item.arguments === "string" ? item.arguments : JSON.stringify(item.arguments);
        row.appendChild(el("div", "approval-args mono small", args.length > 400 ? args.slice(0, 400) + "…" : args));
      }
      var acts = el("div", "approval-acts");
      var approve = el("button", "approve", "Approve");
      var deny = el("button", "deny", "Deny");
      var reason = el("input");
      reason.type = "text"; reason.placeholder = "reason (optional)"; reason.setAttribute("aria-label", "reason");
      var label = el("label", "small");
      var always = el("input"); always.type = "checkbox";
      label.appendChild(always); label.appendChild(document.createTextNode(" always, for this session"));
      approve.addEventListener("click", function () { answer(item, "approve", row); });
      deny.addEventListener("click", function () { answer(item, "deny", row); });
      [approve, deny, reason, label].forEach(function (e) { acts.appendChild(e); });
      if (notes[item.id]) { acts.appendChild(el("span", "small muted", notes[item.id])); }
      row.appendChild(acts);
      box.appendChild(row);
    });
  };

  var timer = null;
  var poll = function (now) {
    if (timer) { clearTimeout(timer); }
    fetch(box.getAttribute("data-url"), { cache: "no-store" }).then(function (r) { return r.json(); })
      .then(function (body) {
        var focused = box.contains(document.activeElement) && document.activeElement.type === "text";
        if (!focused || now) { render(body.waiting || []); }
        timer = setTimeout(poll, 2000);
      }).catch(function () { timer = setTimeout(poll, 5000); });
  };
  poll(true);
})();
