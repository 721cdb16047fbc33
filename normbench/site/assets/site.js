// normbench leaderboard: sortable, filterable, paged tables. No data is injected as HTML; only textContent is written.
(function () {
  "use strict";

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

  function sortTable(table, th) {
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
    refresh(table);
  }

  function init() {
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
          box.addEventListener("change", function () { refresh(table); });
          box.addEventListener("input", function () { refresh(table); });
        }
        var more = moreButton(table);
        if (more) more.addEventListener("click", function () { table._nbAll = true; refresh(table); });
        refresh(table);
      })(tables[t]);
    }
    document.documentElement.classList.add("js");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
