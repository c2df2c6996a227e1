// Sorts a table's rows by the column whose header is clicked (again: the other way).
// Each cell's data-value holds what it sorts by (a number, or text where none is given).
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th[data-sort]").forEach(function (th, column) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0];
      var index = Array.prototype.indexOf.call(th.parentNode.children, th);
      var down = th.getAttribute("aria-sort") === "ascending";
      var rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var cell = row.cells[index];
        var value = cell.getAttribute("data-value");
        if (value === null) { value = cell.textContent; }
        var number = parseFloat(value);
        return isNaN(number) ? value : number;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var order = (typeof x === "number" && typeof y === "number") ? x - y
          : String(x).localeCompare(String(y));
        return down ? -order : order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
      table.querySelectorAll("th[data-sort]").forEach(function (other) {
        other.removeAttribute("aria-sort");
      });
      th.setAttribute("aria-sort", down ? "descending" : "ascending");
    });
  });
});
