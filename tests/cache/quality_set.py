"""The search quality set: stored scripts and task descriptions phrased the way users ask.

``SCRIPTS`` are what a cache holds after a while of real use: code that calls tools (filesystem, memory,
and servers such as github, fetch, slack or a database), pure computations, some with a description
given by the model, most with only their docstring, comments and code to go by. ``QUERIES`` name the
scripts that answer them; a query is a hit at k when one of them ranks in the top k.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QualityScript:
    id: str
    code: str
    tools: tuple[str, ...] = ()
    """``server.tool`` names the run called."""
    description: str | None = None
    """Given by the caller; otherwise derived from the code."""


@dataclass(frozen=True)
class Query:
    text: str
    expected: tuple[str, ...]


S = QualityScript

SCRIPTS: list[QualityScript] = [
    S(
        "csv-sum-column",
        """
# total revenue from the sales export
import csv, io
text = filesystem.read_text_file(path="data/sales.csv")["content"]
rows = list(csv.DictReader(io.StringIO(text)))
total = sum(float(r["amount"]) for r in rows)
print(f"{len(rows)} rows, total {total:.2f}")
""",
        ("filesystem.read_text_file",),
    ),
    S(
        "log-errors-by-level",
        """
\"\"\"Count log lines per level (ERROR, WARNING, INFO) in app.log.\"\"\"
from collections import Counter
lines = filesystem.read_text_file(path="logs/app.log")["content"].splitlines()
levels = Counter(line.split()[2] for line in lines if len(line.split()) > 2)
print(levels.most_common())
""",
        ("filesystem.read_text_file",),
    ),
    S(
        "largest-files",
        """
entries = filesystem.list_directory_with_sizes(path=".", sortBy="size")["content"]
top = entries.splitlines()[:10]
print("\\n".join(top))
""",
        ("filesystem.list_directory_with_sizes",),
        "Show the ten biggest files in the project directory",
    ),
    S(
        "find-todo-comments",
        """
# look for TODO and FIXME markers in every markdown and python file
import re
paths = filesystem.search_files(path=".", pattern="**/*.{md,py}")["content"].splitlines()
for p in paths:
    text = filesystem.read_text_file(path=p)["content"]
    for n, line in enumerate(text.splitlines(), 1):
        if re.search(r"TODO|FIXME", line):
            print(f"{p}:{n}: {line.strip()}")
""",
        ("filesystem.search_files", "filesystem.read_text_file"),
    ),
    S(
        "json-to-csv",
        """
\"\"\"Convert users.json (a list of objects) into users.csv with a header row.\"\"\"
import csv, io, json
users = json.loads(filesystem.read_text_file(path="users.json")["content"])
out = io.StringIO()
writer = csv.DictWriter(out, fieldnames=sorted(users[0]))
writer.writeheader()
writer.writerows(users)
filesystem.write_file(path="users.csv", content=out.getvalue())
""",
        ("filesystem.read_text_file", "filesystem.write_file"),
    ),
    S(
        "merge-csv-files",
        """
# concatenate the monthly reports into one file, keeping a single header
files = sorted(p for p in filesystem.list_directory(path="reports")["content"].split() if p.endswith(".csv"))
header, body = None, []
for name in files:
    lines = filesystem.read_text_file(path="reports/" + name)["content"].splitlines()
    header = header or lines[0]
    body.extend(lines[1:])
filesystem.write_file(path="reports/all.csv", content="\\n".join([header, *body]))
""",
        ("filesystem.list_directory", "filesystem.read_text_file", "filesystem.write_file"),
    ),
    S(
        "rename-photos-by-date",
        """
import datetime
for name in filesystem.list_directory(path="photos")["content"].split():
    info = filesystem.get_file_info(path="photos/" + name)
    stamp = datetime.datetime.fromisoformat(info["modified"]).strftime("%Y-%m-%d")
    filesystem.move_file(source="photos/" + name, destination=f"photos/{stamp}_{name}")
""",
        ("filesystem.list_directory", "filesystem.get_file_info", "filesystem.move_file"),
        "Prefix every photo's file name with its modification date",
    ),
    S(
        "duplicate-files",
        """
\"\"\"Find duplicate files: same content hash in different paths.\"\"\"
import hashlib
from collections import defaultdict
groups = defaultdict(list)
for path in filesystem.search_files(path="downloads", pattern="**/*")["content"].splitlines():
    data = filesystem.read_text_file(path=path)["content"]
    groups[hashlib.sha256(data.encode()).hexdigest()].append(path)
print([paths for paths in groups.values() if len(paths) > 1])
""",
        ("filesystem.search_files", "filesystem.read_text_file"),
    ),
    S(
        "word-frequency",
        """
# most common words in a book, ignoring case and punctuation
import re
from collections import Counter
text = filesystem.read_text_file(path="books/moby_dick.txt")["content"].lower()
words = re.findall(r"[a-z']+", text)
print(Counter(w for w in words if len(w) > 3).most_common(20))
""",
        ("filesystem.read_text_file",),
    ),
    S(
        "parse-ini-config",
        """
\"\"\"Read settings.ini and print each section's keys and values.\"\"\"
section, config = "default", {}
for raw in filesystem.read_text_file(path="settings.ini")["content"].splitlines():
    line = raw.strip()
    if line.startswith("["):
        section = line.strip("[]")
    elif "=" in line and not line.startswith(";"):
        key, value = line.split("=", 1)
        config.setdefault(section, {})[key.strip()] = value.strip()
config
""",
        ("filesystem.read_text_file",),
    ),
    S(
        "extract-emails",
        """
import re
found = set()
for path in filesystem.search_files(path="inbox", pattern="*.txt")["content"].splitlines():
    found |= set(re.findall(r"[\\w.+-]+@[\\w-]+\\.[\\w.]+", filesystem.read_text_file(path=path)["content"]))
sorted(found)
""",
        ("filesystem.search_files", "filesystem.read_text_file"),
        "Collect every email address mentioned in the inbox text files",
    ),
    S(
        "json-number-stats",
        """
# mean, median and standard deviation of response times in metrics.json
import json, statistics
times = [m["ms"] for m in json.loads(filesystem.read_text_file(path="metrics.json")["content"])]
print(statistics.mean(times), statistics.median(times), statistics.pstdev(times))
""",
        ("filesystem.read_text_file",),
    ),
    S(
        "scaffold-project",
        """
\"\"\"Create the folder layout of a new Python project: src, tests, README and pyproject.\"\"\"
for d in ["myproj/src/myproj", "myproj/tests"]:
    filesystem.create_directory(path=d)
filesystem.write_file(path="myproj/README.md", content="# myproj\\n")
filesystem.write_file(path="myproj/pyproject.toml", content="[project]\\nname = 'myproj'\\n")
filesystem.write_file(path="myproj/src/myproj/__init__.py", content="")
""",
        ("filesystem.create_directory", "filesystem.write_file"),
    ),
    S(
        "backup-file",
        """
import datetime
stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
content = filesystem.read_text_file(path="notes.md")["content"]
filesystem.write_file(path=f"backups/notes-{stamp}.md", content=content)
""",
        ("filesystem.read_text_file", "filesystem.write_file"),
        "Make a timestamped backup copy of notes.md",
    ),
    S(
        "diff-two-files",
        """
# unified diff between the old and the new version of the config
import difflib
old = filesystem.read_text_file(path="config.old.json")["content"].splitlines()
new = filesystem.read_text_file(path="config.json")["content"].splitlines()
print("\\n".join(difflib.unified_diff(old, new, "config.old.json", "config.json", lineterm="")))
""",
        ("filesystem.read_text_file",),
    ),
    S(
        "replace-in-files",
        """
\"\"\"Rename the function fetch_data to load_data across all Python sources.\"\"\"
for path in filesystem.search_files(path="src", pattern="**/*.py")["content"].splitlines():
    if "fetch_data" in filesystem.read_text_file(path=path)["content"]:
        filesystem.edit_file(path=path, edits=[{"oldText": "fetch_data", "newText": "load_data"}])
""",
        ("filesystem.search_files", "filesystem.read_text_file", "filesystem.edit_file"),
    ),
    S(
        "recently-modified",
        """
# which files changed in the last 24 hours
import datetime
cutoff = datetime.datetime.now() - datetime.timedelta(days=1)
for path in filesystem.search_files(path=".", pattern="**/*")["content"].splitlines():
    info = filesystem.get_file_info(path=path)
    if datetime.datetime.fromisoformat(info["modified"]) > cutoff:
        print(path, info["modified"])
""",
        ("filesystem.search_files", "filesystem.get_file_info"),
    ),
    S(
        "orders-per-customer",
        """
import json
from collections import defaultdict
orders = json.loads(filesystem.read_text_file(path="orders.json")["content"])
per_customer = defaultdict(float)
for order in orders:
    per_customer[order["customer"]] += order["total"]
sorted(per_customer.items(), key=lambda kv: -kv[1])[:5]
""",
        ("filesystem.read_text_file",),
        "Top five customers by total order value",
    ),
    S(
        "memory-remember-note",
        """
memory.create_entities(entities=[{"name": "Alice", "entityType": "person",
    "observations": ["prefers meetings in the morning", "works on the billing team"]}])
""",
        ("memory.create_entities",),
        "Remember facts about a colleague in the knowledge graph",
    ),
    S(
        "memory-add-observation",
        """
# add a new fact to an existing entity in the knowledge graph
memory.add_observations(observations=[{"entityName": "ProjectX", "contents": ["deadline moved to March 3"]}])
""",
        ("memory.add_observations",),
    ),
    S(
        "memory-list-people",
        """
\"\"\"List every person stored in the knowledge graph with their observations.\"\"\"
graph = memory.read_graph()
for entity in graph["entities"]:
    if entity["entityType"] == "person":
        print(entity["name"], "-", "; ".join(entity["observations"]))
""",
        ("memory.read_graph",),
    ),
    S(
        "memory-relate",
        """
memory.create_relations(relations=[{"from": "Alice", "to": "ProjectX", "relationType": "leads"}])
""",
        ("memory.create_relations",),
        "Record that Alice leads ProjectX",
    ),
    S(
        "memory-search",
        """
# find knowledge-graph nodes that mention kubernetes
result = memory.search_nodes(query="kubernetes")
[e["name"] for e in result["entities"]]
""",
        ("memory.search_nodes",),
    ),
    S(
        "memory-cleanup",
        """
\"\"\"Delete entities of type 'temp' from the knowledge graph.\"\"\"
graph = memory.read_graph()
stale = [e["name"] for e in graph["entities"] if e["entityType"] == "temp"]
memory.delete_entities(entityNames=stale)
print("deleted", len(stale))
""",
        ("memory.read_graph", "memory.delete_entities"),
    ),
    S(
        "memory-export",
        """
import json
graph = memory.read_graph()
filesystem.write_file(path="exports/graph.json", content=json.dumps(graph, indent=2))
""",
        ("memory.read_graph", "filesystem.write_file"),
        "Export the whole knowledge graph to a JSON file",
    ),
    S(
        "github-issues-by-label",
        """
# count the open issues of a repository per label
from collections import Counter
issues = github.list_issues(owner="psf", repo="requests", state="open")
labels = Counter(label["name"] for issue in issues for label in issue["labels"])
print(labels.most_common())
""",
        ("github.list_issues",),
    ),
    S(
        "github-repos-by-stars",
        """
\"\"\"Rank an organisation's repositories by stargazers.\"\"\"
repos = github.search_repositories(query="org:pallets")["items"]
for repo in sorted(repos, key=lambda r: -r["stargazers_count"])[:10]:
    print(repo["full_name"], repo["stargazers_count"])
""",
        ("github.search_repositories",),
    ),
    S(
        "github-open-issue",
        """
github.create_issue(owner="acme", repo="webapp", title="Login page times out",
                    body="Steps to reproduce: open /login on a slow connection.", labels=["bug"])
""",
        ("github.create_issue",),
        "File a bug report issue on GitHub",
    ),
    S(
        "github-merged-prs",
        """
# pull requests merged during the last seven days
import datetime
since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=7)
pulls = github.list_pull_requests(owner="acme", repo="webapp", state="closed")
for pr in pulls:
    if pr.get("merged_at") and datetime.datetime.fromisoformat(pr["merged_at"].replace("Z", "+00:00")) > since:
        print(pr["number"], pr["title"])
""",
        ("github.list_pull_requests",),
    ),
    S(
        "github-readme",
        """
readme = github.get_file_contents(owner="encode", repo="httpx", path="README.md")
print(readme["content"][:500])
""",
        ("github.get_file_contents",),
    ),
    S(
        "github-code-search",
        """
\"\"\"Find where a function is defined across GitHub code.\"\"\"
hits = github.search_code(q="def parse_headers language:python")
for item in hits["items"][:20]:
    print(item["repository"]["full_name"], item["path"])
""",
        ("github.search_code",),
    ),
    S(
        "web-page-title",
        """
import re
html = fetch.fetch(url="https://example.com", raw=True)
match = re.search(r"<title>(.*?)</title>", html, re.S)
print(match.group(1).strip() if match else "no title")
""",
        ("fetch.fetch",),
    ),
    S(
        "rest-api-json",
        """
# call the GitHub REST API for a user and print a few fields
import json
data = json.loads(fetch.fetch(url="https://api.github.com/users/octocat", raw=True))
print(data["name"], data["public_repos"], data["followers"])
""",
        ("fetch.fetch",),
    ),
    S(
        "url-health-check",
        """
\"\"\"Check which of our URLs answer, and report the broken ones.\"\"\"
urls = ["https://example.com", "https://example.org/health", "https://example.net/status"]
broken = []
for url in urls:
    try:
        fetch.fetch(url=url, max_length=100)
    except ToolError as exc:
        broken.append((url, str(exc)))
print(broken or "all up")
""",
        ("fetch.fetch",),
    ),
    S(
        "rss-titles",
        """
import re
feed = fetch.fetch(url="https://blog.python.org/feeds/posts/default?alt=rss", raw=True)
titles = re.findall(r"<title>(.*?)</title>", feed)[1:11]
print("\\n".join(titles))
""",
        ("fetch.fetch",),
        "Latest post titles from an RSS feed",
    ),
    S(
        "fibonacci",
        """
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
[fib(i) for i in range(30)]
""",
    ),
    S(
        "primes-sieve",
        """
# sieve of Eratosthenes: all primes below one million
limit = 1_000_000
sieve = bytearray([1]) * limit
sieve[0:2] = b"\\x00\\x00"
for i in range(2, int(limit ** 0.5) + 1):
    if sieve[i]:
        sieve[i*i::i] = bytearray(len(range(i*i, limit, i)))
print(sum(sieve), "primes")
""",
    ),
    S(
        "loan-amortization",
        """
\"\"\"Monthly payment and amortization schedule of a fixed-rate mortgage.\"\"\"
principal, rate, years = 300_000, 0.045, 30
r, n = rate / 12, years * 12
payment = principal * r / (1 - (1 + r) ** -n)
balance = principal
for month in range(1, 13):
    interest = balance * r
    balance -= payment - interest
    print(month, round(payment, 2), round(interest, 2), round(balance, 2))
""",
    ),
    S(
        "temperature-convert",
        """
celsius = [-40, 0, 21.5, 37, 100]
{c: round(c * 9 / 5 + 32, 1) for c in celsius}
""",
        (),
        "Convert Celsius temperatures to Fahrenheit",
    ),
    S(
        "business-days",
        """
# number of working days (Mon-Fri) between two dates
import datetime
start, end = datetime.date(2024, 3, 1), datetime.date(2024, 4, 15)
days = sum(1 for i in range((end - start).days) if (start + datetime.timedelta(days=i)).weekday() < 5)
print(days)
""",
    ),
    S(
        "validate-json",
        """
import json
document = '{"name": "demo", "items": [1, 2, 3}'
try:
    json.loads(document)
    print("valid")
except json.JSONDecodeError as exc:
    print(f"invalid at line {exc.lineno} column {exc.colno}: {exc.msg}")
""",
        (),
        "Check whether a string is valid JSON and say where it breaks",
    ),
    S(
        "random-password",
        """
\"\"\"Generate strong random passwords.\"\"\"
import secrets, string
alphabet = string.ascii_letters + string.digits + "!@#$%^&*"
[''.join(secrets.choice(alphabet) for _ in range(20)) for _ in range(5)]
""",
    ),
    S(
        "sha256-digest",
        """
import hashlib
for text in ["hello", "world"]:
    print(text, hashlib.sha256(text.encode()).hexdigest())
""",
    ),
    S(
        "base64-roundtrip",
        """
# encode a string to base64 and decode it back
import base64
encoded = base64.b64encode("café ☕".encode()).decode()
print(encoded, base64.b64decode(encoded).decode())
""",
    ),
    S(
        "roman-numerals",
        """
def to_roman(n):
    values = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
              (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, numeral in values:
        while n >= value:
            out, n = out + numeral, n - value
    return out
[to_roman(y) for y in (1987, 2024, 3999)]
""",
    ),
    S(
        "timezone-convert",
        """
\"\"\"What time is a 9:00 New York meeting in London, Berlin and Tokyo?\"\"\"
import datetime
from zoneinfo import ZoneInfo
meeting = datetime.datetime(2024, 6, 3, 9, 0, tzinfo=ZoneInfo("America/New_York"))
{tz: meeting.astimezone(ZoneInfo(tz)).strftime("%H:%M") for tz in ["Europe/London", "Europe/Berlin", "Asia/Tokyo"]}
""",
    ),
    S(
        "matrix-multiply",
        """
a = [[1, 2], [3, 4], [5, 6]]
b = [[7, 8, 9], [10, 11, 12]]
[[sum(x * y for x, y in zip(row, col)) for col in zip(*b)] for row in a]
""",
        (),
        "Multiply two matrices in pure Python",
    ),
    S(
        "sort-records",
        """
# sort employee records by department, then by salary descending
employees = [{"name": "Ann", "dept": "ops", "salary": 70}, {"name": "Bo", "dept": "dev", "salary": 90},
             {"name": "Cy", "dept": "dev", "salary": 80}]
sorted(employees, key=lambda e: (e["dept"], -e["salary"]))
""",
    ),
    S(
        "text-statistics",
        """
\"\"\"Word count, sentence count and estimated reading time of an article.\"\"\"
import re
article = filesystem.read_text_file(path="drafts/article.md")["content"]
words = len(re.findall(r"\\w+", article))
sentences = len(re.findall(r"[.!?]+", article))
print(words, "words,", sentences, "sentences,", round(words / 230, 1), "minutes to read")
""",
        ("filesystem.read_text_file",),
    ),
    S(
        "url-query-params",
        """
from urllib.parse import urlparse, parse_qs
url = "https://shop.example.com/search?q=red+shoes&size=42&page=3"
parts = urlparse(url)
{"host": parts.netloc, "path": parts.path, "params": parse_qs(parts.query)}
""",
        (),
        "Split a URL into host, path and query parameters",
    ),
    S(
        "ip-in-subnet",
        """
# which of these addresses belong to the office network 10.20.0.0/16
import ipaddress
network = ipaddress.ip_network("10.20.0.0/16")
[ip for ip in ["10.20.3.4", "10.21.0.1", "192.168.1.9"] if ipaddress.ip_address(ip) in network]
""",
    ),
    S(
        "month-calendar",
        """
import calendar
print(calendar.month(2024, 2))
""",
        (),
        "Print the calendar of February 2024",
    ),
    S(
        "generate-uuids",
        """
import uuid
[str(uuid.uuid4()) for _ in range(10)]
""",
    ),
    S(
        "slugify-titles",
        """
\"\"\"Turn article titles into URL slugs (ASCII, lowercase, dashes).\"\"\"
import re, unicodedata
def slugify(title):
    ascii_text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
[slugify(t) for t in ["Héllo Wörld!", "Python 3.12: What's new?"]]
""",
    ),
    S(
        "fixture-summary-stats",
        """
values = [3.5, 7.25, 1.0, 9.75]
fixture.stats(values=values)
""",
        ("fixture.stats",),
        "Summary statistics (count, total, mean) of a list of numbers",
    ),
    S(
        "fixture-centroid",
        """
# weighted centre of a few delivery locations
points = [{"x": 0, "y": 0}, {"x": 4, "y": 0}, {"x": 0, "y": 3}]
fixture.centroid(points=points, weights=[1, 2, 1])
""",
        ("fixture.centroid",),
    ),
    S(
        "fixture-km-to-miles",
        """
[fixture.convert(amount=d, unit="km") for d in (5, 10, 21.1, 42.195)]
""",
        ("fixture.convert",),
        "Race distances from kilometres to miles",
    ),
    S(
        "sql-signups-per-day",
        """
# daily sign-ups over the last month from the users table
rows = postgres.query(sql="SELECT date(created_at) AS day, count(*) AS n FROM users "
                          "WHERE created_at > now() - interval '30 days' GROUP BY 1 ORDER BY 1")
for row in rows:
    print(row["day"], row["n"])
""",
        ("postgres.query",),
    ),
    S(
        "slack-post-summary",
        """
\"\"\"Post the nightly build summary to the #releases Slack channel.\"\"\"
text = filesystem.read_text_file(path="build/summary.txt")["content"]
slack.post_message(channel="#releases", text=text[:3000])
""",
        ("filesystem.read_text_file", "slack.post_message"),
    ),
    S(
        "weather-forecast",
        """
forecast = weather.get_forecast(city="Lisbon", days=3)
for day in forecast["days"]:
    print(day["date"], day["summary"], day["max_c"])
""",
        ("weather.get_forecast",),
        "Three-day weather forecast for a city",
    ),
    S(
        "today-meetings",
        """
# my meetings today, in start-time order
import datetime
today = datetime.date.today().isoformat()
events = calendar_api.list_events(calendarId="primary", timeMin=today + "T00:00:00Z", timeMax=today + "T23:59:59Z")
for e in sorted(events["items"], key=lambda e: e["start"]["dateTime"]):
    print(e["start"]["dateTime"][11:16], e["summary"])
""",
        ("calendar_api.list_events",),
    ),
    S(
        "jira-close-tickets",
        """
\"\"\"Move every resolved Jira ticket of the sprint to Done.\"\"\"
issues = jira.search(jql="sprint in openSprints() AND status = Resolved")
for issue in issues["issues"]:
    jira.transition_issue(issueKey=issue["key"], transition="Done")
print(len(issues["issues"]), "tickets closed")
""",
        ("jira.search", "jira.transition_issue"),
    ),
    S(
        "email-report",
        """
summary = filesystem.read_text_file(path="reports/weekly.md")["content"]
email.send(to=["team@example.com"], subject="Weekly report", body=summary)
""",
        ("filesystem.read_text_file", "email.send"),
        "Email the weekly report to the team",
    ),
    S(
        "s3-bucket-size",
        """
# total size and object count of an S3 bucket prefix
objects = s3.list_objects(bucket="company-backups", prefix="2024/")
total = sum(o["Size"] for o in objects["Contents"])
print(len(objects["Contents"]), "objects,", round(total / 1024**3, 2), "GiB")
""",
        ("s3.list_objects",),
    ),
    S(
        "http-status-codes",
        """
\"\"\"Fetch several API endpoints concurrently-free, one by one, and tabulate their response sizes.\"\"\"
sizes = {}
for path in ["/users", "/orders", "/products"]:
    body = fetch.fetch(url="https://api.example.com" + path, raw=True)
    sizes[path] = len(body)
sizes
""",
        ("fetch.fetch",),
    ),
    S(
        "csv-filter-rows",
        """
# keep only the rows of customers.csv whose country is Germany and save them
import csv, io
reader = csv.DictReader(io.StringIO(filesystem.read_text_file(path="customers.csv")["content"]))
rows = [r for r in reader if r["country"] == "DE"]
out = io.StringIO()
writer = csv.DictWriter(out, fieldnames=reader.fieldnames)
writer.writeheader()
writer.writerows(rows)
filesystem.write_file(path="customers_de.csv", content=out.getvalue())
""",
        ("filesystem.read_text_file", "filesystem.write_file"),
    ),
    S(
        "directory-tree",
        """
tree = filesystem.directory_tree(path="src")
print(tree)
""",
        ("filesystem.directory_tree",),
        "Show the folder structure of the source tree",
    ),
]

QUERIES: list[Query] = [
    Query("add up the amount column in a csv", ("csv-sum-column",)),
    Query("how many errors and warnings are in the log file", ("log-errors-by-level",)),
    Query("what are the biggest files taking up space", ("largest-files",)),
    Query("find all TODO comments in the codebase", ("find-todo-comments",)),
    Query("turn a JSON array into a spreadsheet CSV", ("json-to-csv",)),
    Query("combine several CSV reports into one", ("merge-csv-files",)),
    Query("rename pictures so their names start with the date", ("rename-photos-by-date",)),
    Query("detect identical files in a folder", ("duplicate-files",)),
    Query("count word occurrences in a text document", ("word-frequency",)),
    Query("read an ini configuration file", ("parse-ini-config",)),
    Query("pull email addresses out of text", ("extract-emails",)),
    Query("average and median latency from a metrics file", ("json-number-stats",)),
    Query("set up a skeleton for a new python package", ("scaffold-project",)),
    Query("copy a file with a timestamp as a backup", ("backup-file",)),
    Query("compare two versions of a file and show the differences", ("diff-two-files",)),
    Query("search and replace a function name in all source files", ("replace-in-files",)),
    Query("files changed since yesterday", ("recently-modified",)),
    Query("which customers spent the most", ("orders-per-customer",)),
    Query("save information about a person to memory", ("memory-remember-note", "memory-add-observation")),
    Query("list the people in the knowledge graph", ("memory-list-people",)),
    Query("connect two entities with a relationship", ("memory-relate",)),
    Query("look up nodes about kubernetes in memory", ("memory-search",)),
    Query("dump the memory graph to a json file", ("memory-export",)),
    Query("open issues grouped by label on a github repo", ("github-issues-by-label",)),
    Query("most starred repositories of an organization", ("github-repos-by-stars",)),
    Query("report a bug on github", ("github-open-issue",)),
    Query("what pull requests got merged this week", ("github-merged-prs",)),
    Query("fetch GitHub API", ("rest-api-json", "github-readme")),
    Query("get the title of a web page", ("web-page-title",)),
    Query("check if websites are down", ("url-health-check",)),
    Query("read the latest entries of a blog feed", ("rss-titles",)),
    Query("compute prime numbers", ("primes-sieve",)),
    Query("monthly mortgage payment calculator", ("loan-amortization",)),
    Query("convert degrees celsius to fahrenheit", ("temperature-convert",)),
    Query("count weekdays between two dates excluding weekends", ("business-days",)),
    Query("generate a secure random password", ("random-password",)),
    Query("convert a meeting time between time zones", ("timezone-convert",)),
    Query("make url-friendly slugs from titles", ("slugify-titles",)),
    Query("mean of a list of numbers with the stats tool", ("fixture-summary-stats", "json-number-stats")),
    Query("how many users signed up each day", ("sql-signups-per-day",)),
    Query("send a message to a slack channel", ("slack-post-summary",)),
    Query("what's the weather going to be", ("weather-forecast",)),
    Query("what meetings do I have today", ("today-meetings",)),
    Query("close resolved jira tickets", ("jira-close-tickets",)),
    Query("email a report to my team", ("email-report",)),
    Query("how much storage does the backup bucket use", ("s3-bucket-size",)),
    Query("parse CSV and sum a column", ("csv-sum-column",)),
    Query("keep only rows matching a country from a CSV", ("csv-filter-rows",)),
    Query("roman numeral conversion", ("roman-numerals",)),
    Query("reading time of an article", ("text-statistics",)),
    # paraphrases with few words in common with the scripts
    Query("tally how often each term shows up in a novel", ("word-frequency",)),
    Query("which of our endpoints respond and which are broken", ("url-health-check", "http-status-codes")),
    Query("figure out what I pay each month on a house loan", ("loan-amortization",)),
    Query("globally unique identifiers", ("generate-uuids",)),
    Query("is this address inside our office LAN", ("ip-in-subnet",)),
    Query("spot copies of the same download", ("duplicate-files",)),
    Query("daily registrations from the database", ("sql-signups-per-day",)),
    Query("post an update to the team chat", ("slack-post-summary",)),
    Query("hex digest of some text", ("sha256-digest",)),
    Query("show me the folder hierarchy", ("directory-tree",)),
]
