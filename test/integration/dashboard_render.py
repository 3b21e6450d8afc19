# -------------------------------------------------------------------------
#
# dashboard_render.py
#     A picture of prometheus/jobflow-dashboard.json without Grafana: each
#     panel's queries run against a Prometheus (query_range), drawn as SVG
#     (stats, time series, heatmap) where the dashboard's gridPos puts
#     them, in one static HTML page (no script, nothing fetched), which
#     headless chromium turns into a PNG.  Used by test_dashboard.py when
#     scripts/dashboard-screenshot.sh asks for docs/images/dashboard.png;
#     never by the suite itself.
#
# -------------------------------------------------------------------------

import html
import math
import shutil
import subprocess
import time

WIDTH = 1400            # page width, px: 24 grid columns
ROW = 30                # px per grid row, as Grafana
PAD = 6
COLORS = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff",
          "#fade2a", "#96d98d", "#ffb357", "#ca95e5", "#ff7383"]
THRESHOLD = {"green": "#1a7f37", "red": "#c4162a", "orange": "#e0752d", "blue": "#1f60c4"}


def fmt(v, unit):
    if v is None or v != v:
        return "-"
    if unit == "s":
        if v == 0:
            return "0 s"
        if abs(v) < 1:
            return "%.3g ms" % (v * 1000)
        if abs(v) < 120:
            return "%.3g s" % v
        return "%.3g min" % (v / 60)
    suffix = "/s" if unit == "reqps" else ""
    if abs(v) >= 1000:
        return "%.3gk%s" % (v / 1000, suffix)
    return ("%.3g" % v) + suffix


def legend(fmt_string, metric):
    out = fmt_string or ""
    for k, v in metric.items():
        out = out.replace("{{%s}}" % k, v)
    return out


def series_of(panel, prom, start, end, step, substitute):
    """[(name, [(t, v)])] of every target of the panel."""
    out = []
    for t in panel["targets"]:
        for r in prom.query_range(substitute(t["expr"]), start, end, step):
            pts = [(float(ts), float(v)) for ts, v in r["values"]]
            out.append((legend(t.get("legendFormat"), r["metric"]), pts))
    return out


def svg_stat(panel, prom, end, substitute, w, h):
    unit = panel["fieldConfig"]["defaults"].get("unit")
    res = prom.query(substitute(panel["targets"][0]["expr"]), end)
    v = float(res[0]["value"][1]) if res else None
    color = "#333"
    steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
    for s in steps:
        if v is not None and (s["value"] is None or v >= s["value"]):
            color = THRESHOLD.get(s["color"], s["color"])
    text = fmt(v, unit)
    for m in panel["fieldConfig"]["defaults"].get("mappings", []):
        if v is not None and ("%g" % v) in m["options"]:
            text = m["options"]["%g" % v]["text"]
    return ('<rect x="0" y="24" width="%d" height="%d" fill="%s" rx="3"/>'
            '<text x="%d" y="%d" font-size="34" font-weight="600" fill="#fff" '
            'text-anchor="middle">%s</text>' % (w, h - 24, color, w / 2, 24 + (h - 24) / 2 + 12,
                                                html.escape(text)))


def time_axis(start, end, left, pw, y):
    """Four times (UTC) under a plot, the last one ending at its edge."""
    out = []
    for i in range(4):
        ts = start + (end - start) * i / 3
        anchor = "start" if i == 0 else "end" if i == 3 else "middle"
        out.append('<text x="%.1f" y="%d" font-size="10" fill="#8e8e8e" text-anchor="%s">%s</text>'
                   % (left + pw * i / 3, y, anchor, time.strftime("%H:%M:%S", time.gmtime(ts))))
    return "".join(out)


def svg_timeseries(panel, series, start, end, w, h):
    unit = panel["fieldConfig"]["defaults"].get("unit")
    left, top, bottom = 58, 26, 16 + 16 * min(3, math.ceil(len(series) / 3))
    pw, ph = w - left - 8, h - top - bottom - 18
    vals = [v for _, pts in series for _, v in pts if v == v and not math.isinf(v)]
    lo = min(vals + [0])
    hi = max(vals + [0])
    if hi == lo:
        hi = lo + 1
    hi *= 1.08
    parts = []
    for i in range(5):
        y = top + ph - ph * i / 4
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#2c3035"/>' % (left, left + pw, y, y))
        parts.append('<text x="%d" y="%.1f" font-size="10" fill="#8e8e8e" text-anchor="end">%s</text>'
                     % (left - 4, y + 3, html.escape(fmt(lo + (hi - lo) * i / 4, unit))))
    parts.append(time_axis(start, end, left, pw, top + ph + 13))
    stacked = panel["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode") == "normal"
    base = {}
    for n, (name, pts) in enumerate(series):
        color = COLORS[n % len(COLORS)]
        coords = []
        for ts, v in pts:
            if v != v or math.isinf(v):
                continue
            if stacked:
                v += base.get(ts, 0)
                base[ts] = v
            x = left + pw * (ts - start) / max(1, end - start)
            y = top + ph - ph * (v - lo) / (hi - lo)
            coords.append("%.1f,%.1f" % (x, y))
        if coords:
            parts.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6"/>'
                         % (" ".join(coords), color))
        if n < 9:
            lx = 8 + (n % 3) * (w / 3)
            ly = h - bottom + 14 + 16 * (n // 3)
            parts.append('<rect x="%.1f" y="%d" width="10" height="3" fill="%s"/>'
                         '<text x="%.1f" y="%d" font-size="11" fill="#ccccdc">%s</text>'
                         % (lx, ly - 4, color, lx + 14, ly, html.escape(name[:40])))
    return "".join(parts)


def svg_heatmap(panel, series, start, end, w, h):
    """Cumulative buckets by le -> counts per bucket per step, log-coloured."""
    by_le = {}
    for name, pts in series:
        by_le[float(name)] = dict(pts)
    les = sorted(by_le)
    times = sorted({ts for d in by_le.values() for ts in d})
    cells = []
    for i, le in enumerate(les):
        row = []
        for ts in times:
            c = by_le[le].get(ts, 0) - (by_le[les[i - 1]].get(ts, 0) if i else 0)
            row.append(max(0.0, c if c == c else 0.0))
        cells.append(row)
    used = [i for i, row in enumerate(cells) if any(row)] or [0]
    rows = list(range(max(0, min(used) - 1), min(len(les), max(used) + 2)))
    left, top, bottom = 58, 26, 22
    pw, ph = w - left - 8, h - top - bottom
    peak = max([c for r in cells for c in r] + [1])
    parts = []
    cw = pw / max(1, len(times))
    rh = ph / max(1, len(rows))
    for k, i in enumerate(rows):
        y = top + ph - (k + 1) * rh
        for j, c in enumerate(cells[i]):
            if c <= 0:
                continue
            a = 0.15 + 0.85 * math.log1p(c) / math.log1p(peak)
            parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#ff9830" '
                         'fill-opacity="%.2f"/>' % (left + j * cw, y, cw + 0.3, rh - 1, a))
        label = "+Inf" if math.isinf(les[i]) else fmt(les[i], "s")
        parts.append('<text x="%d" y="%.1f" font-size="10" fill="#8e8e8e" text-anchor="end">&#8804; %s</text>'
                     % (left - 4, y + rh / 2 + 3, html.escape(label)))
    parts.append(time_axis(start, end, left, pw, top + ph + 14))
    return "".join(parts)


def render(board, prom, start, end, substitute, png, html_path):
    step = max(1, int((end - start) / 150))
    col = WIDTH / 24.0
    boxes = []
    bottom = 0
    for panel in board["panels"]:
        g = panel["gridPos"]
        x, y, w, h = g["x"] * col, g["y"] * ROW + 44, g["w"] * col, g["h"] * ROW
        bottom = max(bottom, y + h)
        iw, ih = w - 2 * PAD, h - 2 * PAD
        if panel["type"] == "stat":
            body = svg_stat(panel, prom, end, substitute, iw, ih)
        else:
            series = series_of(panel, prom, start, end, step, substitute)
            if panel["type"] == "heatmap":
                body = svg_heatmap(panel, series, start, end, iw, ih)
            else:
                body = svg_timeseries(panel, series, start, end, iw, ih)
        boxes.append('<svg style="position:absolute;left:%.0fpx;top:%.0fpx" width="%.0f" height="%.0f">'
                     '<rect width="100%%" height="100%%" fill="#181b1f" stroke="#2c3035" rx="3"/>'
                     '<g transform="translate(%d,%d)"><text x="2" y="12" font-size="13" font-weight="600" '
                     'fill="#d8d9da">%s</text>%s</g></svg>'
                     % (x + 2, y + 2, w - 4, h - 4, PAD, PAD, html.escape(panel["title"]), body))
    height = int(bottom + 8)
    page = ('<!DOCTYPE html><html><head><meta charset="utf-8"><style>'
            'body{margin:0;background:#111217;font-family:"DejaVu Sans",sans-serif;'
            'width:%dpx;height:%dpx;position:relative;overflow:hidden}</style></head><body>'
            '<div style="position:absolute;left:12px;top:10px;color:#d8d9da;font-size:18px">'
            'jobflow &#8212; database: All &#8212; Prometheus, last %d s</div>%s</body></html>'
            % (WIDTH, height, end - start, "".join(boxes)))
    with open(html_path, "w") as f:
        f.write(page)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "chromium is not installed (apt-get install chromium)"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--force-device-scale-factor=1", "--window-size=%d,%d" % (WIDTH, height),
                    "--screenshot=%s" % png, "file://" + html_path],
                   check=True, capture_output=True, timeout=120)
