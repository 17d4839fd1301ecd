// The action text form parses back, and bad text is an error that names it.
#include <gtest/gtest.h>

#include "core/error.h"
#include "schedule/action.h"

namespace pt::schedule {
namespace {

TEST(Action, TextRoundTrips) {
  for (const char* text : {"2F0", "2B0", "2W0", "0SA3>5", "3RA0<4", "2SG7>1", "1RG0<2", "2AR0", "12ST31"}) {
    Action a = parse_action(text, 3);
    EXPECT_EQ(to_string(a), text);
    EXPECT_EQ(a.worker, 3);
    EXPECT_EQ(parse_action(to_string(a), 3), a);
  }
  Action a = parse_action("2SA0>5", 1);
  EXPECT_EQ(a.kind, ActionKind::kSendActivation);
  EXPECT_EQ(a.stage, 2);
  EXPECT_EQ(a.microbatch, 0);
  EXPECT_EQ(a.peer, 5);
}

TEST(Action, BadTextNamesIt) {
  for (const char* text : {"", "F0", "2X0", "2F", "2SA0", "2SA0<5", "2F0>1", "2F0x", "-1F0"}) {
    try {
      parse_action(text, 0);
      ADD_FAILURE() << text << " parsed";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + text + "'"), std::string::npos) << e.what();
    }
  }
  // Numbers past an int are named as too long, not as missing.
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"0F2147483647", "a microbatch number of more than 9 digits"},
           {"99999999999F0", "a stage number of more than 9 digits"},
           {"0SA0>1234567890", "a peer worker number of more than 9 digits"},
           {"0F", "no microbatch number"}}) {
    try {
      parse_action(text, 0);
      ADD_FAILURE() << text << " parsed";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pt::schedule
