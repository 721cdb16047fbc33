// normbench leaderboard: sortable, filterable, paged tables whose view is kept in the URL (permalinks); a big table's
// rows come from its data file (data/<id>.js, same origin). No data is injected as HTML: only textContent and
// vetted attributes are written (one exception, a model's answer on one machine: HTML the build rendered with its own
// autoescaping template, parsed by DOMParser, whose documents run no script; see initParts).
(function () {
  "use strict";

  var loaders = {};

  // A data file's payload (normbench/site/tables.py, data_script): JSON, gzip-compressed and base64-encoded (a third
  // of the plain JSON's bytes), decoded here with the browser's DecompressionStream (no fetch(): it works from
  // file://). then(object), or then(null) where this browser cannot decode it.
  function inflate(b64, then) {
    try {
      var bin = atob(b64), bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text().then(
        function (text) { then(JSON.parse(text)); }, function () { then(null); });
    } catch (e) {
      then(null);
    }
  }

  // A data file's callback: its last argument decoded first where it is a compressed payload (a string).
  function packed(handle, failed) {
    return function () {
      var args = Array.prototype.slice.call(arguments), last = args.length - 1;
      if (typeof args[last] !== "string") { handle.apply(null, args); return; }
      inflate(args[last], function (obj) {
        if (obj === null || obj === undefined) { failed.apply(null, args); return; }
        args[last] = obj;
        handle.apply(null, args);
      });
    };
  }

  // Only links the site builds itself: relative paths or absolute http(s) addresses.
  function safeHref(h) {
    return typeof h === "string" && (/^https?:\/\//i.test(h) || /^[A-Za-z0-9_.\/#-]+$/.test(h) && !/^[a-z]+:/i.test(h))
      ? h : null;
  }

  function makeCell(c, col) {
    var td = document.createElement("td");
    var cls = (col.num ? "num " : "") + (c.k || "");
    if (cls.trim()) td.className = cls.trim();
    if (c.v !== undefined && c.v !== null) td.setAttribute("data-v", String(c.v));
    var href = c.h ? safeHref(c.h) : null, inner;
    if (href) {
      inner = document.createElement("a");
      inner.setAttribute("href", href);
      if (c.x) inner.setAttribute("rel", "noopener noreferrer nofollow");
      if (c.ti) inner.setAttribute("title", c.ti);
    } else if (c.ti) {
      inner = document.createElement("span");
      inner.setAttribute("title", c.ti);
    }
    if (inner) { inner.textContent = c.t; td.appendChild(inner); } else td.appendChild(document.createTextNode(c.t));
    if (c.n) {
      td.appendChild(document.createTextNode(" "));
      var n = document.createElement("span"); n.className = "muted"; n.textContent = c.n; td.appendChild(n);
    }
    (c.b || []).forEach(function (b) {
      td.appendChild(document.createTextNode(" "));
      var s = document.createElement("span");
      s.className = "flag flag-" + String(b[1]).replace(/[^a-z_]/g, "");
      s.setAttribute("title", b[1] + ": " + b[2]);
      s.textContent = b[0];
      td.appendChild(s);
    });
    return td;
  }

  // A data file's packed rows (normbench/site/tables.py, pack_rows) as plain ones: every string is an index into
  // data.s; a cell is the index of its text or [t, v, h, ti, n, x, b, k]; a row is [cells, filter values, class].
  function unpack(data) {
    var S = data.s || [], keys = data.fk || [];
    function str(i) { return typeof i === "number" ? S[i] : undefined; }
    return data.rows.map(function (r) {
      var f = {};
      (r[1] || []).forEach(function (i, j) { if (typeof i === "number") f[keys[j]] = S[i]; });
      var cells = r[0].map(function (c) {
        if (typeof c === "number") return { t: S[c] };
        var v = c[1];
        return { t: str(c[0]) || "", v: Array.isArray(v) ? str(v[0]) : v, h: str(c[2]), ti: str(c[3]), n: str(c[4]),
                 x: c[5], b: (c[6] || []).map(function (b) { return b.map(str); }), k: str(c[7]) };
      });
      return { c: cells, f: f, k: str(r[2]), r: r[3] };
    });
  }

  // A record page (records/<machine>.html) has a line per record (details.record, its id the record's anchor); the
  // detail of every record of the page is in one data file, data/machines/<page>.js (normbench/site/pages.py,
  // record_data), loaded by a <script> tag (same origin: allowed by the CSP, and it works from file://, where fetch()
  // of a local file does not) the first time a record is opened, or at once when the URL names a record. The file
  // calls nbRecords; only textContent and vetted attributes are written.
  var recData = null, recWanted = [], recLoading = false;

  function recordsSrc() {
    var el = document.querySelector("[data-records-src]");
    var src = el ? el.getAttribute("data-records-src") : "";
    return /^(\.\.\/)*data\/machines\/[A-Za-z0-9_.-]+\.js$/.test(src) ? src : null;
  }

  function fillRecord(box) {
    var data = recData, S = data.s, K = data.k;
    var rec = data.r[parseInt(box.getAttribute("data-rec"), 10)];
    if (!rec || box.getAttribute("data-filled")) return;
    function str(i) { return typeof i === "number" && i >= 0 && i < S.length ? String(S[i]) : null; }
    function pairsOf(keys, values) {
      var ks = K[keys] || [], out = [];
      for (var j = 0; j < ks.length && j < (values || []).length; j++) out.push([str(ks[j]), str(values[j])]);
      return out;
    }
    function el(tag, text, cls) {
      var x = document.createElement(tag);
      if (text !== null && text !== undefined) x.textContent = text;
      if (cls) x.className = cls;
      return x;
    }
    function table(pairs) {
      var t = el("table", null, "lb compact kv"), body = document.createElement("tbody");
      pairs.forEach(function (kv) {
        var tr = document.createElement("tr");
        tr.appendChild(el("th", kv[0]));
        tr.appendChild(el("td", kv[1]));
        body.appendChild(tr);
      });
      t.appendChild(body);
      return t;
    }
    // [config keys, config values, metrics keys, metrics values, provenance, file, position, check, timing, flags,
    //  command, status]
    var frag = document.createDocumentFragment();
    frag.appendChild(el("p", (str(rec[5]) || "") + " [" + String(rec[6]) + "]" + (str(rec[7]) ? "; " + str(rec[7]) : "")));
    if (rec[11] === 2) frag.appendChild(el("p", "Invalid: the output or a gradient was not finite. Its numbers are used nowhere.", "notice"));
    else if (rec[11] === 1) frag.appendChild(el("p", "Flagged: shown, never ranked.", "notice"));
    if (str(rec[8])) frag.appendChild(el("p", str(rec[8]) + ".", "timing"));
    if ((rec[9] || []).length) {
      var ul = document.createElement("ul");
      rec[9].forEach(function (f) {
        var li = document.createElement("li");
        li.appendChild(el("span", str(f[0]), "flag flag-" + String(str(f[1])).replace(/[^a-z_]/g, "")));
        li.appendChild(document.createTextNode(" " + (str(f[2]) || "")));
        ul.appendChild(li);
      });
      frag.appendChild(ul);
    }
    frag.appendChild(el("pre", str(rec[10]), "command"));
    var prov = data.p[rec[4]] || [0, []];
    [["Config", pairsOf(rec[0], rec[1])], ["Metrics", pairsOf(rec[2], rec[3])],
     ["Provenance (its run)", pairsOf(prov[0], prov[1])]].forEach(function (part) {
      frag.appendChild(el("h3", part[0]));
      frag.appendChild(table(part[1]));
    });
    while (box.firstChild) box.removeChild(box.firstChild);
    box.appendChild(frag);
    box.setAttribute("data-filled", "1");
    box.className += " kv";
  }

  window.nbRecords = packed(function (data) {
    if (!data || !data.s || !data.r || !data.k || !data.p || recData) return;
    recData = data;
    var wanted = recWanted;
    recWanted = [];
    wanted.forEach(fillRecord);
  }, function () {
    recWanted.forEach(function (box) {
      box.textContent = "This browser cannot decompress the record data (it needs DecompressionStream); the " +
        "page's JSON.gz has every record.";
    });
    recWanted = [];
  });

  // Open a record's line and show its detail (loading the page's data file the first time).
  function openRecord(details) {
    var box = details.querySelector("div.detail[data-rec]");
    if (!box) return;
    if (!details.open) details.open = true;
    if (recData) { fillRecord(box); return; }
    recWanted.push(box);
    var src = recordsSrc();
    if (src && !recLoading) {
      recLoading = true;
      var rs = document.createElement("script");
      rs.src = src;
      document.head.appendChild(rs);
    }
  }

  function recordFromHash() {
    var id = decodeURIComponent((location.hash || "").slice(1));
    var target = id ? document.getElementById(id) : null;
    if (target && target.tagName === "DETAILS" && target.classList.contains("record")) {
      openRecord(target);
      target.scrollIntoView();
    }
  }

  function initRecords() {
    if (!recordsSrc()) return;
    document.addEventListener("toggle", function (ev) {
      var d = ev.target;
      if (d && d.tagName === "DETAILS" && d.classList.contains("record") && d.open) openRecord(d);
    }, true);
    window.addEventListener("hashchange", recordFromHash);
    recordFromHash();
  }

  // Called by a table's data file (data/<id>.js): its rows wait in `arrived` until every file a table names in its
  // data-src is in; then they replace the page's first rows. A table may show the rows of several files (a norm's
  // every-record table is the union of its per-device tables' files, written once): they are merged in the order of
  // each row's rank key (r[3], set by the build), so the union reads as ranked as a single file would.
  var arrived = {};
  window.nbData = packed(function (id, data) {
    if (typeof id !== "string" || !data || !data.rows) return;
    arrived[id] = data;
    var own = document.getElementById(id);   // a table given its rows directly (no data-src of its own)
    if (own && !own.getAttribute("data-src") && !loaders[id]) loaders[id] = function () {};
    Object.keys(loaders).forEach(function (tid) { fill(tid); });
  }, function (id) {
    // Not decoded: every table waiting for this file keeps its first rows (as when the file is missing).
    Object.keys(loaders).forEach(function (tid) {
      var table = document.getElementById(tid);
      if (!table || srcIds(table).indexOf(id) < 0) return;
      var done = loaders[tid];
      delete loaders[tid];
      done();
    });
  });

  function srcIds(table) {
    if (!table.getAttribute("data-src")) return [table.id];
    return (table.getAttribute("data-src") || "").split(/\s+/).filter(Boolean).map(function (src) {
      return src.replace(/^.*\//, "").replace(/\.js$/, "");
    });
  }

  function rankCompare(a, b) {
    var x = a.r || [], y = b.r || [];
    for (var i = 0; i < Math.max(x.length, y.length); i++) {
      if (x[i] === y[i]) continue;
      if (x[i] === undefined) return -1;
      if (y[i] === undefined) return 1;
      return x[i] < y[i] ? -1 : 1;
    }
    return a.i - b.i;
  }

  function fill(tid) {
    var table = document.getElementById(tid);
    if (!table || !loaders[tid]) return;
    var ids = srcIds(table);
    if (!ids.every(function (id) { return arrived[id]; })) return;
    var rows = [];
    ids.forEach(function (id) { rows = rows.concat(unpack(arrived[id])); });
    // A machine's data file holds every norm's rows; a norm's table keeps its own (data-only="norm=<name>").
    var only = table.getAttribute("data-only"), eq = only ? only.indexOf("=") : -1;
    if (eq > 0) {
      var key = only.slice(0, eq), want = only.slice(eq + 1);
      rows = rows.filter(function (r) { return r.f && r.f[key] === want; });
      table.setAttribute("data-rows", String(rows.length));
    }
    if (ids.length > 1) {
      rows = rows.map(function (r, i) { r.i = i; return r; });
      rows.sort(rankCompare);
    }
    var cols = Array.prototype.map.call(table.tHead.rows[0].cells, function (th) {
      return { num: th.getAttribute("data-sort") === "num" };
    });
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) {
      var tr = document.createElement("tr");
      if (r.k) tr.className = r.k;
      Object.keys(r.f || {}).forEach(function (k) {
        if (/^[a-z_]+$/.test(k)) tr.setAttribute("data-f-" + k, String(r.f[k]));
      });
      r.c.forEach(function (c, i) { tr.appendChild(makeCell(c, cols[i] || {})); });
      frag.appendChild(tr);
    });
    var body = table.tBodies[0];
    while (body.firstChild) body.removeChild(body.firstChild);
    body.appendChild(frag);
    table.setAttribute("data-loaded", "1");
    var done = loaders[tid];
    delete loaders[tid];
    if (done) done();
  }

  function load(table, then) {
    var ids = srcIds(table);
    if (!table.getAttribute("data-src") || table.getAttribute("data-loaded")) { then(); return; }
    loaders[table.id] = then;
    var failed = false;
    (table.getAttribute("data-src") || "").split(/\s+/).filter(Boolean).forEach(function (src, i) {
      if (arrived[ids[i]] || document.querySelector('script[data-nb-src="' + ids[i] + '"]')) return;
      var s = document.createElement("script");
      s.src = src;
      s.setAttribute("data-nb-src", ids[i]);
      s.onerror = function () { if (!failed) { failed = true; delete loaders[table.id]; then(); } };
      document.head.appendChild(s);
    });
    fill(table.id);
  }

  // The view of a table as URL fragment: #t=<table id>&<filter>=<value>&q=<text>&sort=<column>:<a|d>.
  function readState() {
    var h = location.hash.replace(/^#/, "");
    if (h.indexOf("t=") !== 0) return null;
    var out = {};
    h.split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1).replace(/\+/g, " "));
    });
    return out;
  }

  function writeState(table) {
    var box = filterBox(table);
    var parts = ["t=" + encodeURIComponent(table.id)];
    if (box) {
      box.querySelectorAll("select[data-filter]").forEach(function (s) {
        if (s.value) parts.push(encodeURIComponent(s.getAttribute("data-filter")) + "=" + encodeURIComponent(s.value));
      });
      var q = box.querySelector("input[data-search]");
      if (q && q.value.trim()) parts.push("q=" + encodeURIComponent(q.value.trim()));
    }
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) {
      var dir = heads[i].getAttribute("aria-sort");
      if (table._nbSorted && (dir === "ascending" || dir === "descending"))
        parts.push("sort=" + i + ":" + (dir === "ascending" ? "a" : "d"));
    }
    var hash = "#" + parts.join("&");
    if (history.replaceState) history.replaceState(null, "", hash);
    var link = document.querySelector('a[data-permalink-for="' + table.id + '"]');
    if (link) { link.setAttribute("href", hash); link.hidden = false; }
  }

  function applyState(table, st) {
    var box = filterBox(table);
    if (box) {
      box.querySelectorAll("select[data-filter]").forEach(function (s) {
        var want = st[s.getAttribute("data-filter")];
        if (want !== undefined && Array.prototype.some.call(s.options, function (o) { return o.value === want; }))
          s.value = want;
      });
      var q = box.querySelector("input[data-search]");
      if (q && st.q) q.value = st.q;
    }
    if (st.sort) {
      var m = /^(\d+):([ad])$/.exec(st.sort), th = m && table.tHead.rows[0].cells[+m[1]];
      if (th) {
        th.setAttribute("aria-sort", m[2] === "a" ? "descending" : "ascending");  // sortTable flips it
        sortTable(table, th, true);
      }
    }
  }

  function cellValue(row, index, numeric) {
    var cell = row.cells[index];
    if (!cell) return numeric ? null : "";
    var v = cell.getAttribute("data-v");
    if (numeric) {
      if (v === null || v === "") return null;
      var x = parseFloat(v);
      return isNaN(x) ? null : x;
    }
    return (v !== null ? v : cell.textContent).trim().toLowerCase();
  }

  function filterBox(table) {
    var boxes = document.querySelectorAll(".filters[data-table]");
    for (var i = 0; i < boxes.length; i++) if (boxes[i].getAttribute("data-table") === table.id) return boxes[i];
    return null;
  }

  function moreButton(table) {
    var buttons = document.querySelectorAll("button[data-more-for]");
    for (var i = 0; i < buttons.length; i++) if (buttons[i].getAttribute("data-more-for") === table.id) return buttons[i];
    return null;
  }

  // Shows the rows that pass the filters, the first `data-page` of them unless "show all" was pressed;
  // hidden rows cost no layout, so long tables stay quick.
  function refresh(table) {
    var box = filterBox(table);
    var selects = box ? box.querySelectorAll("select[data-filter]") : [];
    var search = box ? box.querySelector("input[data-search]") : null;
    var needle = search ? search.value.trim().toLowerCase() : "";
    var limit = table._nbAll ? Infinity : (parseInt(table.getAttribute("data-page"), 10) || Infinity);
    var rows = table.tBodies[0].rows;
    var matches = 0, visible = 0;
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i], ok = true;
      for (var j = 0; j < selects.length && ok; j++) {
        var want = selects[j].value;
        if (want !== "" && row.getAttribute("data-f-" + selects[j].getAttribute("data-filter")) !== want) ok = false;
      }
      if (ok && needle && row.textContent.toLowerCase().indexOf(needle) < 0) ok = false;
      if (ok) matches++;
      var show = ok && matches <= limit;
      if (show) visible++;
      if (row.hidden === show) row.hidden = !show;
    }
    var total = rows.length, text;
    if (matches === total) text = visible < matches ? "showing " + visible + " of " + total + " rows" : total + " rows";
    else text = visible < matches ? "showing " + visible + " of " + matches + " matching (" + total + " rows)"
                                  : matches + " of " + total + " rows";
    var count = box ? box.querySelector(".count") : null;
    if (count) count.textContent = text;
    var more = moreButton(table);
    if (more) {
      more.hidden = visible >= matches;
      more.textContent = "show all " + matches + " rows";
    }
  }

  function sortTable(table, th, quiet) {
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute("data-sort") === "num";
    var current = th.getAttribute("aria-sort");
    // Numbers start ascending (fastest time first); a second click reverses.
    var dir = current === "ascending" ? "descending" : "ascending";
    var heads = th.parentNode.children;
    for (var i = 0; i < heads.length; i++) heads[i].setAttribute("aria-sort", "none");
    th.setAttribute("aria-sort", dir);
    var body = table.tBodies[0];
    var sign = dir === "ascending" ? 1 : -1;
    // Keys are read once per row (not per comparison) so thousands of rows sort at once.
    var items = Array.prototype.map.call(body.rows, function (r, i) {
      return { row: r, key: cellValue(r, index, numeric), i: i };
    });
    items.sort(function (a, b) {
      var x = a.key, y = b.key;
      // Missing values always sink to the bottom, whatever the direction.
      var xm = x === null || x === "", ym = y === null || y === "";
      if (xm || ym) return xm && ym ? a.i - b.i : (xm ? 1 : -1);
      if (x < y) return -sign;
      if (x > y) return sign;
      return a.i - b.i;
    });
    var frag = document.createDocumentFragment();
    items.forEach(function (it) { frag.appendChild(it.row); });
    body.appendChild(frag);
    table._nbSorted = true;
    refresh(table);
    if (!quiet) writeState(table);
  }

  // A model's page in a many-machine site (models/<model>.html): a machine picker; the picked machine's answer is a
  // part (data/model-<model>--<machine>.js, normbench/site/pages.py, model_page), HTML rendered by the build's own
  // autoescaping templates, loaded by a <script> tag and parsed by DOMParser (whose documents run no script; the CSP
  // forbids inline scripts anyway). #m=<machine> picks a machine from a link.
  var parts = {}, partWanted = null;

  function showPart(box, html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    while (box.firstChild) box.removeChild(box.firstChild);
    Array.prototype.forEach.call(doc.body.childNodes, function (n) { box.appendChild(document.importNode(n, true)); });
    box.setAttribute("data-part", partWanted);
  }

  window.nbPart = packed(function (id, html) {
    var box = document.getElementById("nb-part");
    if (typeof id !== "string" || typeof html !== "string" || !box) return;
    parts[id] = html;
    if (partWanted === id) showPart(box, html);
  }, function (id) {
    var box = document.getElementById("nb-part");
    if (box && partWanted === id)
      box.textContent = "This browser cannot decompress the answer (it needs DecompressionStream).";
  });

  function initParts() {
    var pick = document.getElementById("nb-part-pick"), box = document.getElementById("nb-part");
    if (!pick || !box) return;
    function choose(fromHash) {
      var opt = pick.options[pick.selectedIndex];
      var src = opt && opt.getAttribute("data-part-src"), id = opt && opt.getAttribute("data-part-id");
      if (!src || !id || !/^(\.\.\/)*data\/model-[A-Za-z0-9_.-]+\.js$/.test(src)) return;
      partWanted = id;
      if (!fromHash && history.replaceState) history.replaceState(null, "", "#m=" + pick.value);
      if (parts[id]) { showPart(box, parts[id]); return; }
      box.textContent = "Loading the answer on " + pick.value + "…";
      if (!document.querySelector('script[data-nb-src="' + id + '"]')) {
        var s = document.createElement("script");
        s.src = src;
        s.setAttribute("data-nb-src", id);
        s.onerror = function () { if (partWanted === id) box.textContent = "Could not load " + src + "."; };
        document.head.appendChild(s);
      }
    }
    pick.addEventListener("change", function () { choose(false); });
    var m = /^#m=([A-Za-z0-9_.-]+)/.exec(location.hash || "");
    if (m) {
      pick.value = m[1];
      if (pick.value === m[1]) choose(true);
    }
  }

  function init() {
    initRecords();
    initParts();
    // A norm's page on many machines: a machine's button loads its every record of the norm into the norm's table,
    // from the machine's one data file (data/km-<machine>.js; a <script>, so it works from file:// too).
    document.querySelectorAll("button[data-pick-src]").forEach(function (b) {
      b.addEventListener("click", function () {
        var table = document.getElementById(b.getAttribute("data-pick-for") || "");
        var src = b.getAttribute("data-pick-src") || "";
        if (!table || !/^(\.\.\/)*data\/[A-Za-z0-9_.-]+\.js$/.test(src)) return;
        table.setAttribute("data-src", src);
        table.removeAttribute("data-loaded");
        table._nbAll = false;
        var label = document.querySelector('[data-pick-label-for="' + table.id + '"]');
        if (label) label.textContent = "Every record on " + (b.getAttribute("data-pick-label") || "") + ":";
        load(table, function () { refresh(table); table.scrollIntoView(); });
      });
    });
    var pending = 1;  // this function itself, so tables done at once do not mark the page ready early
    var tables = document.querySelectorAll("table.sortable");
    for (var t = 0; t < tables.length; t++) {
      (function (table) {
        var heads = table.querySelectorAll("thead th[data-sort]");
        for (var h = 0; h < heads.length; h++) {
          (function (th) {
            var button = th.querySelector("button");
            (button || th).addEventListener("click", function () { sortTable(table, th); });
          })(heads[h]);
        }
        var box = filterBox(table);
        if (box) {
          box.addEventListener("change", function () { refresh(table); writeState(table); });
          box.addEventListener("input", function () { refresh(table); writeState(table); });
        }
        var more = moreButton(table);
        if (more) more.addEventListener("click", function () { table._nbAll = true; refresh(table); });
        pending++;
        load(table, function () {
          var st = readState();
          if (st && st.t === table.id) {
            applyState(table, st);
            var link = document.querySelector('a[data-permalink-for="' + table.id + '"]');
            if (link) { link.setAttribute("href", location.hash); link.hidden = false; }
            table.scrollIntoView();
          }
          refresh(table);
          if (--pending === 0) document.documentElement.classList.add("js");
        });
      })(tables[t]);
    }
    if (--pending === 0) document.documentElement.classList.add("js");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
