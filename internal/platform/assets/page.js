// The player page's script: it keeps the page current without a reload. It polls the page's
// /status (every 2 s while the instance starts or waits in its queue, and for 10 s after an
// action; every 10 s otherwise),
// rebuilds the instance's part of the page from it (with textContent: nothing of a status is ever
// parsed as HTML), counts the time left down every second, copies commands to the clipboard,
// offers the terminal links, and sends the forms with fetch. Without it the page works as plain
// HTML: forms, and a Refresh link (and no terminal, which needs a script).
(function () {
  "use strict";

  var page = document.getElementById("page");
  if (!page || !window.fetch) {
    return;
  }
  var base = page.getAttribute("data-base");
  // The server's clock minus the browser's, so that countdowns agree with the server.
  var skew = Date.parse(page.getAttribute("data-now")) - Date.now() || 0;
  var last = "";
  var timer = 0;
  var busy = false;
  // Until then the page polls every 2 s whatever the phase: an action's effect shows once the
  // hook's next status says so.
  var fastUntil = 0;

  // The actions' buttons, as the server writes them (page_actions.go).
  var actions = {
    start: ["Start", "Start the instance"],
    extend: ["Extend", "Extend the instance's time"],
    restart: ["Restart", "Restart the instance (same address and flag)"],
    stop: ["Stop", "Stop the instance (start it again later)"],
    "delete": ["Delete", "Delete the instance"]
  };
  var fast = { none: false, None: true, Creating: true, Queued: true };

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      e.setAttribute(name, attrs[name]);
    });
    if (text !== undefined) {
      e.textContent = text;
    }
    return e;
  }

  function countdown(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    var h = Math.floor(s / 3600);
    var m = Math.floor(s / 60) % 60;
    var two = function (n) {
      return (n < 10 ? "0" : "") + n;
    };
    if (h > 0) {
      return h + "h " + two(m) + "m " + two(s % 60) + "s";
    }
    if (m > 0) {
      return m + "m " + two(s % 60) + "s";
    }
    return s + "s";
  }

  function timeLine(label, id, attr, value) {
    var p = el("p", { "class": "time" }, label + " ");
    var span = el("span", { id: id }, countdown(Date.parse(value) - Date.now() - skew));
    span.setAttribute(attr, value);
    p.appendChild(span);
    return p;
  }

  function endpoint(ep) {
    var li = el("li", { "class": "endpoint" });
    li.appendChild(el("h2", {}, ep.name));
    if (ep.url) {
      var p = el("p");
      p.appendChild(el("a", { "class": "open", href: ep.url, target: "_blank", rel: "noopener noreferrer" }, "Open " + ep.url));
      li.appendChild(p);
    }
    var dl = el("dl");
    (ep.commands || []).forEach(function (c) {
      dl.appendChild(el("dt", {}, c.label));
      var dd = el("dd");
      dd.appendChild(el("code", { "class": c.token ? "command token" : "command" }, c.text));
      dd.appendChild(document.createTextNode(" "));
      dd.appendChild(copyButton(el("button", { type: "button", "class": "copy", "aria-label": "Copy: " + c.label }, "Copy")));
      dl.appendChild(dd);
    });
    li.appendChild(dl);
    if (ep.terminal && window.WebSocket) {
      var t = el("p", { "class": "terminal-link" });
      t.appendChild(el("a", { "class": "terminal", href: ep.terminal }, "Open a terminal"));
      li.appendChild(t);
    }
    return li;
  }

  function render(s) {
    var state = document.getElementById("state");
    var focused = document.activeElement && document.activeElement.form ? document.activeElement.form.id : "";
    var parts = [];
    var p = el("p", { "class": "phase" }, "Status: ");
    p.appendChild(el("strong", { id: "phase", "data-phase": s.phase, tabindex: "-1" }, s.phaseText));
    parts.push(p);
    if (s.queuePosition) {
      parts.push(el("p", { id: "queue" }, "Position " + s.queuePosition + " in your team's queue"));
    }
    if (s.expiresAt) {
      parts.push(timeLine("Time left:", "expires-in", "data-expires-at", s.expiresAt));
    }
    if (s.idleAt) {
      parts.push(timeLine("Stops if unused in:", "idle-in", "data-idle-at", s.idleAt));
    }
    if (s.warnings && s.warnings.length) {
      var ul = el("ul", { id: "warnings" });
      s.warnings.forEach(function (w) {
        ul.appendChild(el("li", {}, w));
      });
      parts.push(ul);
    }
    if (s.message) {
      parts.push(el("p", { id: "message" }, s.message));
    }
    if (s.endpoints && s.endpoints.length) {
      var eps = el("ul", { id: "endpoints" });
      s.endpoints.forEach(function (ep) {
        eps.appendChild(endpoint(ep));
      });
      parts.push(eps);
    }
    var div = el("div", { id: "actions" });
    (s.actions || []).forEach(function (name) {
      var words = actions[name] || [name, name];
      var form = el("form", { id: name, method: "post", action: base + name });
      form.appendChild(el("button", { type: "submit", "aria-label": words[1] }, words[0]));
      div.appendChild(form);
    });
    parts.push(div);
    state.replaceChildren.apply(state, parts);
    if (focused) {
      var again = document.getElementById(focused);
      (again ? again.querySelector("button") : document.getElementById("phase")).focus();
    }
  }

  function notice(text) {
    var n = document.getElementById("notice");
    n.textContent = text;
    n.hidden = !text;
  }

  function schedule() {
    clearTimeout(timer);
    var phase = document.getElementById("phase");
    var quick = fast[phase && phase.getAttribute("data-phase")] || Date.now() < fastUntil;
    timer = setTimeout(poll, quick ? 2000 : 10000);
  }

  function poll() {
    clearTimeout(timer);
    return fetch(base + "status", { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (r) {
        var date = Date.parse(r.headers.get("Date"));
        if (date) {
          skew = date - Date.now();
        }
        if (!r.ok) {
          return r.json().then(function (e) {
            notice(e.error || "The page could not be brought up to date.");
          });
        }
        return r.text().then(function (text) {
          if (text !== last) {
            last = text;
            render(JSON.parse(text));
          }
        });
      })
      .catch(function () {
        notice("The page could not be brought up to date: it tries again.");
      })
      .then(schedule);
  }

  function tick() {
    [["expires-in", "data-expires-at"], ["idle-in", "data-idle-at"]].forEach(function (c) {
      var span = document.getElementById(c[0]);
      if (!span) {
        return;
      }
      var left = Date.parse(span.getAttribute(c[1])) - Date.now() - skew;
      span.textContent = countdown(left);
      if (left <= 0 && left > -1000) {
        setTimeout(poll, 1500); // the hook's next status says what became of it
      }
    });
  }

  // refusal is the sentence of a refused action's page (#refused), read without running it.
  function refusal(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var p = doc.getElementById("refused");
    return p ? p.textContent : "That did not work: refresh the page and try again.";
  }

  function submit(event) {
    var form = event.target;
    if (!form.closest || !form.closest("#actions")) {
      return;
    }
    event.preventDefault();
    if (busy) {
      return;
    }
    busy = true;
    form.querySelectorAll("button").forEach(function (b) {
      b.disabled = true;
    });
    fetch(form.action, { method: "POST", credentials: "same-origin", redirect: "manual" })
      .then(function (r) {
        if (r.type === "opaqueredirect" || r.ok) {
          notice("");
          return;
        }
        return r.text().then(function (html) {
          notice(refusal(html));
        });
      })
      .catch(function () {
        notice("The request did not reach the server: try again.");
      })
      .then(function () {
        busy = false;
        last = "";
        fastUntil = Date.now() + 10000;
        return poll();
      });
  }

  function copyButton(button) {
    if (!navigator.clipboard) {
      button.hidden = true;
      return button;
    }
    button.hidden = false;
    button.addEventListener("click", function () {
      var code = button.parentNode.querySelector("code");
      navigator.clipboard.writeText(code.textContent).then(
        function () {
          button.textContent = "Copied";
          setTimeout(function () {
            button.textContent = "Copy";
          }, 1500);
        },
        function () {
          button.textContent = "Copy failed";
        }
      );
    });
    return button;
  }

  document.querySelectorAll("button.copy").forEach(copyButton);
  // The terminal (a page of its own) needs this script's kind of browser: offered only now.
  if (window.WebSocket) {
    document.querySelectorAll("p.terminal-link").forEach(function (p) {
      p.hidden = false;
    });
  }
  document.addEventListener("submit", submit);
  setInterval(tick, 1000);
  tick();
  schedule();
})();
