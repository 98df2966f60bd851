// Dashboard feeds as the head serves them (runtime/src/head/feeds.h): whatever publishers
// wrote, the list and /metrics come out well-formed, and a malformed feed costs only its part.

#include <catch2/catch.hpp>

#include "head/feeds.h"

namespace rayd::head {
namespace {

using nlohmann::json;

std::map<std::string, json> Feeds(std::map<std::string, std::string> values) {
  return ParseFeeds(values, "feed/");
}

}  // namespace

TEST_CASE("feed samples become one Prometheus family per name, across feeds", "[feeds]") {
  auto feeds = Feeds({
      {"feed/sweep/a", R"({"metrics": [
          {"name": "rayd_tune_trials", "type": "gauge", "help": "Trials.",
           "labels": {"sweep": "a", "status": "RUNNING"}, "value": 2},
          {"name": "rayd_tune_results_total", "type": "counter", "help": "Results.",
           "labels": {"sweep": "a"}, "value": 10}]})"},
      {"feed/sweep/b", R"({"metrics": [
          {"name": "rayd_tune_trials", "type": "gauge", "help": "ignored: the first wins",
           "labels": {"sweep": "b \"quoted\"", "status": "RUNNING"}, "value": 1.5}]})"},
  });
  prometheus::Text text;
  AddFeedMetrics(feeds, text);
  CHECK(text.str() ==
        "# HELP rayd_tune_results_total Results.\n"
        "# TYPE rayd_tune_results_total counter\n"
        "rayd_tune_results_total{sweep=\"a\"} 10\n"
        "# HELP rayd_tune_trials Trials.\n"
        "# TYPE rayd_tune_trials gauge\n"
        "rayd_tune_trials{status=\"RUNNING\",sweep=\"a\"} 2\n"
        "rayd_tune_trials{status=\"RUNNING\",sweep=\"b \\\"quoted\\\"\"} 1.5\n");
}

TEST_CASE("malformed feeds and samples are skipped, the rest exported", "[feeds]") {
  auto feeds = Feeds({
      {"feed/x/not-json", "{nope"},
      {"feed/x/array", "[1, 2]"},
      {"feed/x/metrics-not-a-list", R"({"metrics": "many"})"},
      {"feed/x/bad", R"({"metrics": [
          42,
          {"name": "has space", "type": "gauge", "value": 1},
          {"name": "9starts_with_digit", "type": "gauge", "value": 1},
          {"name": "a_summary", "type": "summary", "value": 1},
          {"name": "no_value", "type": "gauge"},
          {"name": "text_value", "type": "gauge", "value": "3"},
          {"name": "name_as_number", "type": 7, "value": 1},
          {"name": "ok_metric", "type": "gauge", "help": "two\nlines \\ here",
           "labels": {"good": "yes", "bad label": "x", "__reserved": "x", "num": 3}, "value": 4},
          {"name": "ok_metric", "type": "counter", "value": 5},
          {"name": "odd_labels", "type": "gauge", "labels": [1, 2], "value": 6}]})"},
  });
  CHECK(feeds.size() == 2);  // the unparsable value and the array are no feeds
  prometheus::Text text;
  AddFeedMetrics(feeds, text);
  CHECK(text.str() ==
        "# HELP odd_labels \n"
        "# TYPE odd_labels gauge\n"
        "odd_labels 6\n"
        "# HELP ok_metric two\\nlines \\\\ here\n"
        "# TYPE ok_metric gauge\n"
        "ok_metric{good=\"yes\"} 4\n");
}

TEST_CASE("the list of feeds leaves out what each says is for its detail only", "[feeds]") {
  const json summary = json::parse(
      R"({"name": "s", "trials": [1, 2, 3], "curves": {}, "detail_only": ["trials", 5, "absent"]})");
  const json listed = ListedSummary(summary);
  CHECK_FALSE(listed.contains("trials"));
  CHECK(listed.contains("curves"));
  CHECK(listed["name"] == "s");
  const json odd = json::parse(R"({"name": "t", "detail_only": "trials", "trials": []})");
  CHECK(ListedSummary(odd).contains("trials"));  // not a list: nothing is left out
  CHECK(ListedSummary(json::array({1})) == json::array({1}));
}

TEST_CASE("items are keyed by what follows their prefix, unparsable ones left out", "[feeds]") {
  const json items = ParsedByKey({{"series/sweep/s/t1", "[[1, 0.5]]"},
                                  {"series/sweep/s/t2", "not json"},
                                  {"series/sweep/s/t3", "\"text\""}},
                                 "series/sweep/s/");
  CHECK(items == json::parse(R"({"t1": [[1, 0.5]], "t3": "text"})"));
}

}  // namespace rayd::head
