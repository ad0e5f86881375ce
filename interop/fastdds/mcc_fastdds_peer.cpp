/*
 * mcc-fastdds-peer: a foreign (eProsima Fast DDS 2.x) member of an MCC mission.
 *
 *   mcc-fastdds-peer publish   --type T [--topic N] --profile P [--seed S] [--count K]
 *                              [--period-s S]           pattern samples of type T (mcc_glue.hpp)
 *   mcc-fastdds-peer dump      --type T [--topic N] --profile P [--count K] [--timeout-s S]
 *                              each sample received, one JSON line on stdout
 *   mcc-fastdds-peer malformed --kind truncated|utf8|encoding [--count K] [--period-s S]
 *                              bad DetectionBatch samples between valid ones (sensor
 *                              "fastdds-malformed", one detection)
 *   mcc-fastdds-peer radar     --sensor-id ID --position X,Y,Z --scan-period-s S --sigmas R,AZ,EL,VR
 *                              --pd P --clutter-rate C --coverage RMIN,RMAX,ELMIN,ELMAX[,AZ0,WIDTH]
 *                              [--seed N] [--duration-s S]   DetectionBatch from the bus's Truth
 *                              [--iff P_REPLY[,P_FALSE_REPLY] --iff-friends ID,ID,...]  an IFF
 *                              interrogator, as a scenario radar's `iff:` (the friends: the
 *                              scenario's `iff: {mode5: true}` target ids, Truth has no IFF)
 *   mcc-fastdds-peer console   --mission M [--timeout-s S] [--principal P]  reads Track,
 *                              AirPicture and MissionStatus, sends `Command status` (in
 *                              partition cmd/P, default cmd/fastdds-console), prints the reply
 *   mcc-fastdds-peer echo      [--count K] [--timeout-s S] [--profile P]  PerfSample from
 *                              PerfPing back on PerfPong, until one with seq 0
 *
 * Types come from idl/mcc.idl through fastddsgen at build time (never checked in), pattern fill
 * and JSON output from mcc_glue.hpp, generated from the same IDL by `python -m
 * mcc.types.foreign`. QoS comes from the Fast DDS XML profiles that `mcc qos export --vendor
 * fastdds` writes (--qos FILE, else env MCC_FASTDDS_QOS, else mcc-fastdds.xml beside the
 * executable, which `make interop` exports): data_writer/data_reader profile "mcc::PROFILE". Fast DDS 2.x writes and reads XCDR1 only, which is why MCC's writers write
 * XCDR1 (docs/interop.md).
 *
 * Environment: MCC_DOMAIN (default 0), MCC_PARTITIONS (comma-separated), MCC_FASTDDS_PEERS
 * (comma-separated IPv4 addresses: unicast discovery to Cyclone's participant ports 0..99 there
 * and UDP on those interfaces only, for loopback tests; unset: Fast DDS' default multicast
 * discovery), MCC_SYSTEM and MCC_INDEX (set by mcc up: the sourced topics are written in
 * src/SYSTEM.INDEX, see sourced()). SIGTERM or SIGINT stop it with exit status 0; a role that
 * ends on --count or --timeout-s exits 0 when it got what it waited for, 3 when not.
 */
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <fastcdr/Cdr.h>
#include <fastcdr/FastBuffer.h>
#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/log/Log.hpp>
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/publisher/DataWriter.hpp>
#include <fastdds/dds/publisher/Publisher.hpp>
#include <fastdds/dds/subscriber/DataReader.hpp>
#include <fastdds/dds/subscriber/SampleInfo.hpp>
#include <fastdds/dds/subscriber/Subscriber.hpp>
#include <fastdds/dds/topic/TopicDataType.hpp>
#include <fastdds/dds/topic/TypeSupport.hpp>
#include <fastdds/rtps/transport/UDPv4TransportDescriptor.h>
#include <fastrtps/utils/IPLocator.h>

#include "mcc_glue.hpp"

using namespace eprosima::fastdds::dds;
using eprosima::fastrtps::rtps::IPLocator;
using eprosima::fastrtps::rtps::Locator_t;

namespace {

std::atomic<bool> stop_requested{false};

void on_signal(int) { stop_requested = true; }

int64_t now_ns()
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void die(const std::string& what)
{
  Log::Flush();  // Fast DDS logs from a thread of its own: say why before exiting
  std::cerr << "mcc-fastdds-peer: " << what << std::endl;
  std::exit(1);
}

[[noreturn]] void usage(const std::string& what)
{
  std::cerr << "mcc-fastdds-peer: " << what << "\n"
            << "usage: mcc-fastdds-peer publish|dump|malformed|radar|console|echo [options] "
               "(see the header of mcc_fastdds_peer.cpp)"
            << std::endl;
  std::exit(2);
}

std::vector<std::string> split(const std::string& text, char sep)
{
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty())
      out.push_back(item);
  return out;
}

double to_double(const std::string& option, const std::string& text)
{
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    usage(option + ": not a number: " + text);
  return v;
}

std::vector<double> to_doubles(const std::string& option, const std::string& text, size_t min_n,
                               size_t max_n)
{
  std::vector<double> out;
  for (const auto& part : split(text, ','))
    out.push_back(to_double(option, part));
  if (out.size() < min_n || out.size() > max_n)
    usage(option + ": expected " + std::to_string(min_n) + " to " + std::to_string(max_n) +
          " comma-separated numbers, got " + text);
  return out;
}

// Options: --name value pairs, each name from `known`.
std::map<std::string, std::string> options(int argc, char** argv,
                                           const std::vector<std::string>& known)
{
  std::map<std::string, std::string> out;
  for (int i = 0; i < argc; i++)
  {
    std::string name = argv[i];
    if (std::find(known.begin(), known.end(), name) == known.end())
      usage("unknown option " + name);
    if (i + 1 >= argc)
      usage(name + " needs a value");
    out[name] = argv[++i];
  }
  return out;
}

std::string opt(const std::map<std::string, std::string>& o, const std::string& name,
                const std::string& fallback)
{
  auto it = o.find(name);
  return it == o.end() ? fallback : it->second;
}

// -- the participant ------------------------------------------------------------------------

// Sourced topics (mcc.bus.topics): an MCC instance writes them in its own partition
// src/SYSTEM.INDEX, so their readers read src/* beside the bus's partitions, and this peer,
// started by mcc up (MCC_SYSTEM, MCC_INDEX set), writes them in its own.
bool sourced(const std::string& topic)
{
  return topic == "DetectionBatch" || topic == "Heartbeat" || topic == "EngagementOutcome" ||
         topic == "WeaponStatus" || topic == "CommandReply";
}

struct Bus
{
  DomainParticipant* participant = nullptr;
  Publisher* publisher = nullptr;
  Subscriber* subscriber = nullptr;
  Publisher* source_publisher = nullptr;    // src/SYSTEM.INDEX, else the bus's publisher
  Subscriber* source_subscriber = nullptr;  // the bus's partitions and src/*
  bool qos_loaded = false;
  std::map<std::string, Topic*> topics;

  ~Bus()
  {
    if (participant != nullptr)
    {
      participant->delete_contained_entities();
      DomainParticipantFactory::get_instance()->delete_participant(participant);
    }
  }

  Topic* topic(const std::string& name, TypeSupport type)
  {
    auto it = topics.find(name);
    if (it != topics.end())
      return it->second;
    if (participant->find_type(type.get_type_name()) == nullptr &&
        type.register_type(participant) != ReturnCode_t::RETCODE_OK)
      die("cannot register type " + type.get_type_name());
    Topic* t = participant->create_topic(name, type.get_type_name(), TOPIC_QOS_DEFAULT);
    if (t == nullptr)
      die("cannot create topic " + name);
    topics[name] = t;
    return t;
  }

  DataWriterQos writer_qos(const std::string& profile)
  {
    DataWriterQos qos = DATAWRITER_QOS_DEFAULT;
    if (qos_loaded &&
        publisher->get_datawriter_qos_from_profile("mcc::" + profile, qos) != ReturnCode_t::RETCODE_OK)
      die("no data_writer profile mcc::" + profile + " in the QoS file");
    qos.endpoint().history_memory_policy =
        eprosima::fastrtps::rtps::PREALLOCATED_WITH_REALLOC_MEMORY_MODE;
    return qos;
  }

  DataReaderQos reader_qos(const std::string& profile)
  {
    DataReaderQos qos = DATAREADER_QOS_DEFAULT;
    if (qos_loaded &&
        subscriber->get_datareader_qos_from_profile("mcc::" + profile, qos) != ReturnCode_t::RETCODE_OK)
      die("no data_reader profile mcc::" + profile + " in the QoS file");
    qos.endpoint().history_memory_policy =
        eprosima::fastrtps::rtps::PREALLOCATED_WITH_REALLOC_MEMORY_MODE;
    return qos;
  }

  DataWriter* writer(const std::string& topic_name, TypeSupport type, const std::string& profile)
  {
    Publisher* group = sourced(topic_name) ? source_publisher : publisher;
    DataWriter* w = group->create_datawriter(topic(topic_name, type), writer_qos(profile));
    if (w == nullptr)
      die("cannot create a writer of " + topic_name + " with profile " + profile);
    return w;
  }

  DataReader* reader(const std::string& topic_name, TypeSupport type, const std::string& profile)
  {
    Subscriber* group = sourced(topic_name) ? source_subscriber : subscriber;
    DataReader* r = group->create_datareader(topic(topic_name, type), reader_qos(profile));
    if (r == nullptr)
      die("cannot create a reader of " + topic_name + " with profile " + profile);
    return r;
  }
};

// Cyclone's participant ports on a domain: unicast discovery of participant index i.
uint32_t cyclone_discovery_port(uint32_t domain, uint32_t index)
{
  return 7400 + 250 * domain + 10 + 2 * index;
}

// The text of <TAG>…</TAG> in `xml`, "" when absent.
std::string xml_element(const std::string& xml, const std::string& tag)
{
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  size_t start = xml.find(open);
  if (start == std::string::npos)
    return "";
  start += open.size();
  size_t end = xml.find(close, start);
  return end == std::string::npos ? "" : xml.substr(start, end - start);
}

// DDS Security with the OMG builtin plugins, from the same files Cyclone's <Security> element
// names in CYCLONEDDS_URI (what an MCC supervisor gives each instance of a secured mission).
void secure(DomainParticipantQos& pq)
{
  const char* uri = std::getenv("CYCLONEDDS_URI");
  const std::string xml = uri != nullptr ? uri : "";
  const std::string ca = xml_element(xml, "IdentityCA");
  if (ca.empty())
    return;
  auto& props = pq.properties().properties();
  auto set = [&](const std::string& name, std::string value) {
    // Cyclone writes file:/path, Fast DDS reads file:///path
    if (value.rfind("file:", 0) == 0 && value.rfind("file://", 0) != 0)
      value = "file://" + value.substr(5);
    props.emplace_back(name, value);
  };
  set("dds.sec.auth.plugin", "builtin.PKI-DH");
  set("dds.sec.auth.builtin.PKI-DH.identity_ca", ca);
  set("dds.sec.auth.builtin.PKI-DH.identity_certificate", xml_element(xml, "IdentityCertificate"));
  set("dds.sec.auth.builtin.PKI-DH.private_key", xml_element(xml, "PrivateKey"));
  // Fast DDS 2.9 always proposes DH+MODP-2048-256 and sends its public key as a bare integer,
  // which Cyclone 11 refuses (it wants a DER INTEGER); Fast DDS >= 2.11 takes this and uses
  // ECDH, which Cyclone reads (docs/interop.md, security).
  set("dds.sec.auth.builtin.PKI-DH.preferred_key_agreement", "ECDH");
  if (!xml_element(xml, "PermissionsCA").empty())
  {
    set("dds.sec.access.plugin", "builtin.Access-Permissions");
    set("dds.sec.access.builtin.Access-Permissions.permissions_ca",
        xml_element(xml, "PermissionsCA"));
    set("dds.sec.access.builtin.Access-Permissions.governance", xml_element(xml, "Governance"));
    set("dds.sec.access.builtin.Access-Permissions.permissions", xml_element(xml, "Permissions"));
  }
  set("dds.sec.crypto.plugin", "builtin.AES-GCM-GMAC");
  std::cout << "security: builtin plugins, identity " << xml_element(xml, "IdentityCertificate")
            << std::endl;
}

std::unique_ptr<Bus> open_bus(const std::string& qos_file)
{
  auto bus = std::make_unique<Bus>();
  const char* d = std::getenv("MCC_DOMAIN");
  uint32_t domain = d != nullptr ? static_cast<uint32_t>(std::atoi(d)) : 0;
  auto* factory = DomainParticipantFactory::get_instance();
  if (!qos_file.empty())
  {
    if (factory->load_XML_profiles_file(qos_file) != ReturnCode_t::RETCODE_OK)
      die("cannot load QoS profiles " + qos_file);
    bus->qos_loaded = true;
  }
  DomainParticipantQos pq = PARTICIPANT_QOS_DEFAULT;
  pq.name("mcc-fastdds-peer");
  const char* peers = std::getenv("MCC_FASTDDS_PEERS");
  if (peers != nullptr && *peers != '\0')
  {
    auto udp = std::make_shared<eprosima::fastdds::rtps::UDPv4TransportDescriptor>();
    for (const auto& address : split(peers, ','))
    {
      udp->interfaceWhiteList.push_back(address);
      for (uint32_t i = 0; i < 100; i++)
      {
        Locator_t locator;
        IPLocator::setIPv4(locator, address);
        locator.port = cyclone_discovery_port(domain, i);
        pq.wire_protocol().builtin.initialPeersList.push_back(locator);
      }
    }
    pq.transport().use_builtin_transports = false;
    pq.transport().user_transports.push_back(udp);
  }
  secure(pq);
  bus->participant = factory->create_participant(domain, pq);
  if (bus->participant == nullptr)
    die("cannot create a participant on domain " + std::to_string(domain));
  PublisherQos pub = PUBLISHER_QOS_DEFAULT;
  SubscriberQos sub = SUBSCRIBER_QOS_DEFAULT;
  const char* partitions = std::getenv("MCC_PARTITIONS");
  if (partitions != nullptr)
    for (const auto& p : split(partitions, ','))
    {
      pub.partition().push_back(p.c_str());
      sub.partition().push_back(p.c_str());
    }
  bus->publisher = bus->participant->create_publisher(pub);
  bus->subscriber = bus->participant->create_subscriber(sub);
  SubscriberQos source_sub = sub;
  if (source_sub.partition().size() == 0)
    source_sub.partition().push_back("");
  source_sub.partition().push_back("src/*");
  bus->source_subscriber = bus->participant->create_subscriber(source_sub);
  bus->source_publisher = bus->publisher;
  const char* system = std::getenv("MCC_SYSTEM");
  const char* index = std::getenv("MCC_INDEX");
  if (system != nullptr && *system != '\0')
  {
    PublisherQos own = PUBLISHER_QOS_DEFAULT;
    const char* given = std::getenv("MCC_SOURCE");  // SYSTEM.INDEX#GENERATION if secured
    const std::string source =
        given != nullptr && *given != '\0'
            ? std::string("src/") + given
            : std::string("src/") + system + "." + (index != nullptr && *index != '\0' ? index : "0");
    own.partition().push_back(source.c_str());
    bus->source_publisher = bus->participant->create_publisher(own);
  }
  if (bus->publisher == nullptr || bus->subscriber == nullptr ||
      bus->source_subscriber == nullptr || bus->source_publisher == nullptr)
    die("cannot create a publisher or subscriber");
  return bus;
}

// --qos, else $MCC_FASTDDS_QOS, else mcc-fastdds.xml beside this executable (make interop).
std::string qos_file(const std::map<std::string, std::string>& o)
{
  const char* env = std::getenv("MCC_FASTDDS_QOS");
  if (env != nullptr && *env != '\0')
    return opt(o, "--qos", env);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string beside;
  if (n > 0)
  {
    std::string path(self, static_cast<size_t>(n));
    beside = path.substr(0, path.rfind('/') + 1) + "mcc-fastdds.xml";
    if (access(beside.c_str(), R_OK) != 0)
      beside.clear();
  }
  return opt(o, "--qos", beside);
}

// Wait until `writer` matches a reader (so nothing written is lost to discovery), or time out.
bool wait_matched(DataWriter* writer, double timeout_s)
{
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  PublicationMatchedStatus status;
  while (!stop_requested && std::chrono::steady_clock::now() < end)
  {
    writer->get_publication_matched_status(status);
    if (status.current_count > 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// -- publish / dump -------------------------------------------------------------------------

int run_publish(int argc, char** argv)
{
  auto o = options(argc, argv,
                   {"--type", "--topic", "--profile", "--seed", "--count", "--period-s", "--qos",
                    "--match-timeout-s"});
  std::string type = opt(o, "--type", "");
  std::string topic = opt(o, "--topic", type);
  std::string profile = opt(o, "--profile", "");
  if (type.empty() || profile.empty())
    usage("publish needs --type and --profile");
  uint64_t seed = static_cast<uint64_t>(to_double("--seed", opt(o, "--seed", "1")));
  long count = static_cast<long>(to_double("--count", opt(o, "--count", "20")));
  double period_s = to_double("--period-s", opt(o, "--period-s", "0.1"));
  double match_s = to_double("--match-timeout-s", opt(o, "--match-timeout-s", "30"));
  auto bus = open_bus(qos_file(o));
  int rc = 3;
  bool known = mcc_glue::with_type(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using P = typename decltype(tag)::support;
    DataWriter* w = bus->writer(topic, TypeSupport(new P()), profile);
    if (!wait_matched(w, match_s))
    {
      std::cerr << "mcc-fastdds-peer: no reader of " << topic << " matched" << std::endl;
      return;
    }
    std::cout << "publish " << topic << " (" << type << "): matched" << std::endl;
    T sample;
    mcc_glue::fill(sample, seed);
    for (long k = 0; k < count && !stop_requested; k++)
    {
      if (w->write(&sample) != true)
        die("write " + topic + " failed");
      std::this_thread::sleep_for(std::chrono::duration<double>(period_s));
    }
    rc = 0;
  });
  if (!known)
    usage("unknown type " + type);
  return rc;
}

int run_dump(int argc, char** argv)
{
  auto o = options(argc, argv, {"--type", "--topic", "--profile", "--count", "--timeout-s", "--qos"});
  std::string type = opt(o, "--type", "");
  std::string topic = opt(o, "--topic", type);
  std::string profile = opt(o, "--profile", "");
  if (type.empty() || profile.empty())
    usage("dump needs --type and --profile");
  long count = static_cast<long>(to_double("--count", opt(o, "--count", "1")));
  double timeout_s = to_double("--timeout-s", opt(o, "--timeout-s", "30"));
  auto bus = open_bus(qos_file(o));
  long got = 0;
  bool known = mcc_glue::with_type(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using P = typename decltype(tag)::support;
    DataReader* r = bus->reader(topic, TypeSupport(new P()), profile);
    std::cout << "dump " << topic << " (" << type << "): ready" << std::endl;
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!stop_requested && got < count && std::chrono::steady_clock::now() < end)
    {
      if (!r->wait_for_unread_message(eprosima::fastrtps::Duration_t(0, 100000000)))
        continue;
      T sample;
      SampleInfo info;
      while (got < count && r->take_next_sample(&sample, &info) == ReturnCode_t::RETCODE_OK)
      {
        if (!info.valid_data)
          continue;
        std::ostringstream line;
        line << "{\"topic\":\"" << topic << "\",\"sample\":";
        mcc_glue::to_json(line, sample);
        line << "}";
        std::cout << line.str() << std::endl;
        got++;
      }
    }
  });
  if (!known)
    usage("unknown type " + type);
  return got >= count ? 0 : 3;
}

void pack(std::vector<uint8_t>& out, const std::vector<double>& values);

// -- malformed samples ----------------------------------------------------------------------

// A type support that writes whatever bytes it is given under an MCC type name: how a buggy or
// hostile foreign writer looks on the wire.
struct RawBytes
{
  std::vector<uint8_t> bytes;
};

class RawType : public TopicDataType
{
public:
  explicit RawType(const std::string& name)
  {
    setName(name.c_str());
    m_typeSize = 1 << 16;
    m_isGetKeyDefined = false;
  }
  bool serialize(void* data, eprosima::fastrtps::rtps::SerializedPayload_t* payload) override
  {
    auto* raw = static_cast<RawBytes*>(data);
    if (raw->bytes.size() > payload->max_size)
      return false;
    std::memcpy(payload->data, raw->bytes.data(), raw->bytes.size());
    payload->length = static_cast<uint32_t>(raw->bytes.size());
    payload->encapsulation = raw->bytes.size() > 1 && raw->bytes[1] == 1 ? CDR_LE : CDR_BE;
    return true;
  }
  bool deserialize(eprosima::fastrtps::rtps::SerializedPayload_t*, void*) override { return false; }
  std::function<uint32_t()> getSerializedSizeProvider(void* data) override
  {
    return [data]() { return static_cast<uint32_t>(static_cast<RawBytes*>(data)->bytes.size()); };
  }
  void* createData() override { return new RawBytes(); }
  void deleteData(void* data) override { delete static_cast<RawBytes*>(data); }
  bool getKey(void*, eprosima::fastrtps::rtps::InstanceHandle_t*, bool) override { return false; }
};

std::vector<uint8_t> serialized(const mcc::DetectionBatch& batch)
{
  mcc::DetectionBatchPubSubType support;
  eprosima::fastrtps::rtps::SerializedPayload_t payload(1 << 16);
  mcc::DetectionBatch copy = batch;
  if (!support.serialize(&copy, &payload))
    die("cannot serialize a DetectionBatch");
  return std::vector<uint8_t>(payload.data, payload.data + payload.length);
}

int run_malformed(int argc, char** argv)
{
  auto o = options(argc, argv, {"--kind", "--count", "--period-s", "--qos", "--match-timeout-s"});
  std::string kind = opt(o, "--kind", "truncated");
  long count = static_cast<long>(to_double("--count", opt(o, "--count", "20")));
  double period_s = to_double("--period-s", opt(o, "--period-s", "0.1"));
  double match_s = to_double("--match-timeout-s", opt(o, "--match-timeout-s", "30"));
  // A valid batch (one detection 10 km north), which MCC readers take, and its bad versions.
  mcc::DetectionBatch good;
  good.sensor_id("fastdds-malformed");
  good.count(1);
  for (auto* seq : {&good.range_m(), &good.azimuth_rad(), &good.elevation_rad(),
                    &good.radial_velocity_mps(), &good.snr_db(), &good.x_m(), &good.y_m(),
                    &good.z_m()})
    pack(*seq, {0.0});
  pack(good.range_m(), {10000.0});
  pack(good.y_m(), {10000.0});
  pack(good.snr_db(), {20.0});
  std::vector<uint8_t> bad;
  if (kind == "truncated")  // a sequence length that runs past the end of the sample
  {
    bad = serialized(good);
    bad.resize(bad.size() / 2);
  }
  else if (kind == "utf8")  // a string that is not UTF-8
  {
    mcc::DetectionBatch b = good;
    b.sensor_id(std::string("\xff\xfe\xfd", 3));
    bad = serialized(b);
  }
  else if (kind == "encoding")  // an encapsulation kind no XCDR reader knows
  {
    bad = serialized(good);
    bad[1] = 0x7f;
  }
  else
    usage("--kind must be truncated, utf8 or encoding");
  auto bus = open_bus(qos_file(o));
  TypeSupport raw(new RawType("mcc::DetectionBatch"));
  DataWriter* w = bus->writer("DetectionBatch", raw, "sensor_stream");
  if (!wait_matched(w, match_s))
  {
    std::cerr << "mcc-fastdds-peer: no reader of DetectionBatch matched" << std::endl;
    return 3;
  }
  std::cout << "malformed " << kind << ": matched" << std::endl;
  RawBytes bad_bytes{bad};
  for (long k = 0; k < count && !stop_requested; k++)
  {
    if (k % 2 == 0)
      w->write(&bad_bytes);
    else
    {
      good.scan_id(static_cast<uint64_t>(k));
      good.origin_ns(now_ns());
      good.publish_ns(now_ns());
      RawBytes good_bytes{serialized(good)};
      w->write(&good_bytes);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(period_s));
  }
  return 0;
}

// -- radar ----------------------------------------------------------------------------------

void pack(std::vector<uint8_t>& out, const std::vector<double>& values)
{
  out.resize(values.size() * 8);
  for (size_t i = 0; i < values.size(); i++)
  {
    uint64_t bits;
    std::memcpy(&bits, &values[i], 8);
    for (int b = 0; b < 8; b++)  // little-endian on the wire whatever this host is
      out[i * 8 + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
}

std::vector<double> unpack(const std::vector<uint8_t>& in)
{
  std::vector<double> out(in.size() / 8);
  for (size_t i = 0; i < out.size(); i++)
  {
    uint64_t bits = 0;
    for (int b = 0; b < 8; b++)
      bits |= static_cast<uint64_t>(in[i * 8 + b]) << (8 * b);
    std::memcpy(&out[i], &bits, 8);
  }
  return out;
}

// Radar cross-sections by TargetClass (dBsm), as mcc.apps.scenario.RCS_DBSM.
const double RCS_DBSM[] = {0.0, 10.0, -10.0, 10.0, -10.0, -15.0, 0.0};

int run_radar(int argc, char** argv)
{
  auto o = options(argc, argv,
                   {"--sensor-id", "--position", "--scan-period-s", "--sigmas", "--pd",
                    "--clutter-rate", "--coverage", "--seed", "--duration-s", "--qos",
                    "--snr-ref-db", "--max-truth-age-s", "--iff", "--iff-friends"});
  const std::string sensor_id = opt(o, "--sensor-id", "fastdds-radar");
  auto position = to_doubles("--position", opt(o, "--position", "0,0,0"), 3, 3);
  const double period_s = to_double("--scan-period-s", opt(o, "--scan-period-s", "1"));
  auto sigmas = to_doubles("--sigmas", opt(o, "--sigmas", "30,0.003,0.005,2"), 4, 4);
  const double pd = to_double("--pd", opt(o, "--pd", "0.9"));
  const double clutter_rate = to_double("--clutter-rate", opt(o, "--clutter-rate", "0"));
  auto cov = to_doubles("--coverage", opt(o, "--coverage", "0,40000,0,1.0472"), 4, 6);
  const double snr_ref_db = to_double("--snr-ref-db", opt(o, "--snr-ref-db", "13"));
  const double duration_s = to_double("--duration-s", opt(o, "--duration-s", "0"));
  const double max_age_s = to_double("--max-truth-age-s", opt(o, "--max-truth-age-s", "2"));
  // IFF, as mcc.apps.scenario_radar.RadarModel.interrogate: a friend answers IFF_FRIEND (2)
  // with p_reply, else IFF_NO_REPLY (1); any other detection IFF_INVALID (3) with p_false.
  const bool interrogates = o.count("--iff") > 0;
  auto iff_p = to_doubles("--iff", opt(o, "--iff", "0"), 1, 2);
  std::vector<uint32_t> friends;
  for (double id : to_doubles("--iff-friends", opt(o, "--iff-friends", "0"), 1, 4096))
    friends.push_back(static_cast<uint32_t>(id));
  const double p_reply = iff_p[0], p_false = iff_p.size() > 1 ? iff_p[1] : 0.0;
  if (p_reply < 0 || p_reply > 1 || p_false < 0 || p_false > 1)
    usage("radar: --iff P_REPLY[,P_FALSE_REPLY], each in [0, 1]");
  const double sector0 = cov.size() == 6 ? cov[4] : 0.0;
  const double width = cov.size() == 6 ? cov[5] : 2 * M_PI;
  if (period_s <= 0 || period_s > 60 || pd < 0 || pd > 1 || clutter_rate < 0)
    usage("radar: --scan-period-s in (0, 60], --pd in [0, 1], --clutter-rate >= 0");
  std::mt19937_64 rng(static_cast<uint64_t>(to_double("--seed", opt(o, "--seed", "7"))));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);

  auto bus = open_bus(qos_file(o));
  DataReader* truth_reader = bus->reader("Truth", TypeSupport(new mcc::TruthPubSubType()), "sensor_stream");
  DataWriter* writer =
      bus->writer("DetectionBatch", TypeSupport(new mcc::DetectionBatchPubSubType()), "sensor_stream");
  std::cout << "mcc-fastdds-peer radar " << sensor_id << ": scan " << period_s
            << " s, Fast DDS, truth from the bus" << std::endl;

  auto polar = [&](const double p[3], double& r, double& az, double& el) {
    double d[3] = {p[0] - position[0], p[1] - position[1], p[2] - position[2]};
    double ground = std::hypot(d[0], d[1]);
    r = std::hypot(ground, d[2]);
    az = std::fmod(std::atan2(d[0], d[1]) + 2 * M_PI, 2 * M_PI);
    el = std::atan2(d[2], ground);
  };
  auto covered = [&](double r, double az, double el) {
    double off = std::fmod(az - sector0 + 4 * M_PI, 2 * M_PI);
    return r >= cov[0] && r <= cov[1] && el >= cov[2] && el <= cov[3] &&
           (width >= 2 * M_PI || off <= width);
  };

  mcc::Truth newest;
  bool have_truth = false;
  const int64_t period_ns = static_cast<int64_t>(std::llround(period_s * 1e9));
  const int64_t epoch_ns = now_ns() / 1000000000 * 1000000000;
  int64_t k = (now_ns() - epoch_ns + period_ns - 1) / period_ns;
  uint64_t scan_id = 0;
  while (!stop_requested)
  {
    int64_t tick_ns = epoch_ns + k * period_ns;
    int64_t wait_ns = tick_ns - now_ns();
    if (wait_ns > 0)
      std::this_thread::sleep_for(std::chrono::nanoseconds(wait_ns));
    if (stop_requested)
      break;
    k++;
    if (duration_s > 0 && (tick_ns - epoch_ns) * 1e-9 > duration_s)
      break;
    mcc::Truth t;
    SampleInfo info;
    while (truth_reader->take_next_sample(&t, &info) == ReturnCode_t::RETCODE_OK)
      if (info.valid_data && t.time_ns() <= tick_ns + period_ns && (!have_truth || t.time_ns() >= newest.time_ns()))
      {
        newest = t;
        have_truth = true;
      }
    const double t_s = tick_ns * 1e-9;
    std::vector<double> r, az, el, vr, snr, x, y, z;
    std::vector<uint8_t> friend_seen;  // per detection: the target answers Mode 5
    if (have_truth && t_s - newest.time_ns() * 1e-9 <= max_age_s)
    {
      auto px = unpack(newest.x_m()), py = unpack(newest.y_m()), pz = unpack(newest.z_m());
      auto vx = unpack(newest.vx_mps()), vy = unpack(newest.vy_mps()), vz = unpack(newest.vz_mps());
      const auto& ids = newest.target_id();  // <u4[count]
      const double dt = t_s - newest.time_ns() * 1e-9;
      for (uint32_t i = 0; i < newest.count() && i < px.size(); i++)
      {
        double p[3] = {px[i] + vx[i] * dt, py[i] + vy[i] * dt, pz[i] + vz[i] * dt};
        double rr, aa, ee;
        polar(p, rr, aa, ee);
        if (!covered(rr, aa, ee) || uniform(rng) >= pd)
          continue;
        double rel[3] = {p[0] - position[0], p[1] - position[1], p[2] - position[2]};
        double v = (rel[0] * vx[i] + rel[1] * vy[i] + rel[2] * vz[i]) / std::max(rr, 1e-9);
        uint8_t cls = i < newest.target_class().size() ? newest.target_class()[i] : 0;
        double rcs = RCS_DBSM[std::min<size_t>(cls, 6)];
        snr.push_back(snr_ref_db + rcs + 40.0 * std::log10(cov[1] / std::max(rr, 1.0)));
        r.push_back(rr + sigmas[0] * normal(rng));
        az.push_back(std::fmod(aa + sigmas[1] * normal(rng) + 2 * M_PI, 2 * M_PI));
        el.push_back(ee + sigmas[2] * normal(rng));
        vr.push_back(v + sigmas[3] * normal(rng));
        uint32_t id = 0;
        for (int b = 0; b < 4 && i * 4 + b < ids.size(); b++)
          id |= static_cast<uint32_t>(ids[i * 4 + b]) << (8 * b);
        friend_seen.push_back(std::find(friends.begin(), friends.end(), id) != friends.end());
      }
    }
    std::poisson_distribution<int> poisson(clutter_rate > 0 ? clutter_rate : 1.0);
    int clutter = clutter_rate > 0 ? poisson(rng) : 0;
    for (int c = 0; c < clutter; c++)
    {
      double r0 = cov[0], r1 = cov[1];
      r.push_back(std::cbrt(r0 * r0 * r0 + uniform(rng) * (r1 * r1 * r1 - r0 * r0 * r0)));
      az.push_back(std::fmod(sector0 + uniform(rng) * width, 2 * M_PI));
      double s0 = std::sin(cov[2]), s1 = std::sin(cov[3]);
      el.push_back(std::asin(s0 + uniform(rng) * (s1 - s0)));
      vr.push_back(-340.0 + 680.0 * uniform(rng));
      snr.push_back(snr_ref_db - 3.0 - 2.0 * std::log(1.0 - uniform(rng)));
      friend_seen.push_back(0);
    }
    for (size_t i = 0; i < r.size(); i++)
    {
      double ground = r[i] * std::cos(el[i]);
      x.push_back(position[0] + ground * std::sin(az[i]));
      y.push_back(position[1] + ground * std::cos(az[i]));
      z.push_back(position[2] + r[i] * std::sin(el[i]));
    }
    mcc::DetectionBatch batch;
    batch.sensor_id(sensor_id);
    batch.scan_id(scan_id++);
    batch.origin_ns(tick_ns);
    batch.sensor_x_m(position[0]);
    batch.sensor_y_m(position[1]);
    batch.sensor_z_m(position[2]);
    batch.count(static_cast<uint32_t>(r.size()));
    pack(batch.range_m(), r);
    pack(batch.azimuth_rad(), az);
    pack(batch.elevation_rad(), el);
    pack(batch.radial_velocity_mps(), vr);
    pack(batch.snr_db(), snr);
    pack(batch.x_m(), x);
    pack(batch.y_m(), y);
    pack(batch.z_m(), z);
    if (interrogates)
      for (size_t i = 0; i < r.size(); i++)
      {
        double u = uniform(rng);
        batch.iff().push_back(friend_seen[i] ? (u < p_reply ? 2 : 1) : (u < p_false ? 3 : 1));
      }
    batch.publish_ns(now_ns());
    if (!writer->write(&batch))
      die("write DetectionBatch failed");
    if (scan_id % 20 == 1)
      std::cout << "radar " << sensor_id << ": scan " << scan_id - 1 << ", " << r.size()
                << " detections" << std::endl;
  }
  std::cout << "radar " << sensor_id << ": stopped" << std::endl;
  return 0;
}

// -- console --------------------------------------------------------------------------------

int run_console(int argc, char** argv)
{
  auto o = options(argc, argv, {"--mission", "--timeout-s", "--qos", "--client-id", "--principal"});
  const std::string mission = opt(o, "--mission", "");
  if (mission.empty())
    usage("console needs --mission");
  const double timeout_s = to_double("--timeout-s", opt(o, "--timeout-s", "60"));
  const std::string client_id = opt(o, "--client-id", "fastdds-console");
  auto bus = open_bus(qos_file(o));
  DataReader* tracks = bus->reader("Track", TypeSupport(new mcc::TrackPubSubType()), "state");
  DataReader* pictures =
      bus->reader("AirPicture", TypeSupport(new mcc::AirPicturePubSubType()), "sensor_stream");
  DataReader* statuses =
      bus->reader("MissionStatus", TypeSupport(new mcc::MissionStatusPubSubType()), "state");
  DataReader* replies =
      bus->reader("CommandReply", TypeSupport(new mcc::CommandReplyPubSubType()), "command");
  // Requests go out in the partition of who asks on the supervisor's channel, cmd/PRINCIPAL
  // (mcc.bus.rpc): the supervisor learns the sender from it, never from a field.
  PublisherQos cmd_pub = PUBLISHER_QOS_DEFAULT;
  const std::string partition = "cmd/" + opt(o, "--principal", "fastdds-console");
  cmd_pub.partition().push_back(partition.c_str());
  Publisher* cmd_publisher = bus->participant->create_publisher(cmd_pub);
  if (cmd_publisher == nullptr)
    die("cannot create the publisher of partition " + partition);
  DataWriter* commands = cmd_publisher->create_datawriter(
      bus->topic("Command", TypeSupport(new mcc::CommandPubSubType())), bus->writer_qos("request"));
  if (commands == nullptr)
    die("cannot create the Command writer");
  std::cout << "console: ready" << std::endl;

  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  long n_tracks = 0, n_pictures = 0, n_statuses = 0, confirmed = 0;
  bool sent = false, replied = false;
  auto matched_at = std::chrono::steady_clock::now(), sent_at = matched_at;
  const std::string command_id = client_id + "/1";
  while (!stop_requested && std::chrono::steady_clock::now() < end)
  {
    SampleInfo info;
    mcc::Track track;
    while (tracks->take_next_sample(&track, &info) == ReturnCode_t::RETCODE_OK)
      if (info.valid_data)
      {
        n_tracks++;
        if (track.status() == mcc::TRACK_CONFIRMED)
          confirmed++;
        if (n_tracks == 1)
        {
          std::cout << "{\"topic\":\"Track\",\"sample\":";
          mcc_glue::to_json(std::cout, track);
          std::cout << "}" << std::endl;
        }
      }
    mcc::AirPicture picture;
    while (pictures->take_next_sample(&picture, &info) == ReturnCode_t::RETCODE_OK)
      if (info.valid_data && picture.count() > 0 && ++n_pictures == 1)
      {
        std::cout << "{\"topic\":\"AirPicture\",\"sample\":";
        mcc_glue::to_json(std::cout, picture);
        std::cout << "}" << std::endl;
      }
    mcc::MissionStatus status;
    while (statuses->take_next_sample(&status, &info) == ReturnCode_t::RETCODE_OK)
      if (info.valid_data && ++n_statuses == 1)
      {
        std::cout << "{\"topic\":\"MissionStatus\",\"sample\":";
        mcc_glue::to_json(std::cout, status);
        std::cout << "}" << std::endl;
      }
    // Sent a second after the supervisor's reader matched (its side may not have matched this
    // writer yet, and a volatile reader skips what came before), again every 3 s until answered.
    auto now = std::chrono::steady_clock::now();
    PublicationMatchedStatus matched;
    commands->get_publication_matched_status(matched);
    if (matched.current_count == 0)
      matched_at = now;
    if (!replied && matched.current_count > 0 && now - matched_at > std::chrono::seconds(1) &&
        (!sent || now - sent_at > std::chrono::seconds(3)))
    {
      {
        sent_at = now;
        mcc::Command command;
        command.command_id(command_id);
        command.client_id(client_id);
        command.mission(mission);
        command.verb("status");
        command.args_json("{}");
        command.issue_ns(now_ns());
        sent = commands->write(&command) || sent;
      }
    }
    mcc::CommandReply reply;
    while (replies->take_next_sample(&reply, &info) == ReturnCode_t::RETCODE_OK)
      if (info.valid_data && reply.command_id() == command_id && !replied)
      {
        replied = true;
        std::cout << "{\"topic\":\"CommandReply\",\"sample\":";
        mcc_glue::to_json(std::cout, reply);
        std::cout << "}" << std::endl;
      }
    if (replied && confirmed > 0 && n_pictures > 0 && n_statuses > 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cout << "{\"summary\":{\"tracks\":" << n_tracks << ",\"confirmed\":" << confirmed
            << ",\"pictures\":" << n_pictures << ",\"statuses\":" << n_statuses
            << ",\"command_sent\":" << (sent ? "true" : "false")
            << ",\"replied\":" << (replied ? "true" : "false") << "}}" << std::endl;
  return replied && confirmed > 0 && n_pictures > 0 && n_statuses > 0 ? 0 : 3;
}

// -- echo (latency) -------------------------------------------------------------------------

int run_echo(int argc, char** argv)
{
  auto o = options(argc, argv, {"--count", "--timeout-s", "--qos", "--profile"});
  const long count = static_cast<long>(to_double("--count", opt(o, "--count", "0")));
  const double timeout_s = to_double("--timeout-s", opt(o, "--timeout-s", "0"));
  const std::string profile = opt(o, "--profile", "perf_reliable");
  auto bus = open_bus(qos_file(o));
  DataReader* ping = bus->reader("PerfPing", TypeSupport(new mcc::PerfSamplePubSubType()), profile);
  DataWriter* pong = bus->writer("PerfPong", TypeSupport(new mcc::PerfSamplePubSubType()), profile);
  std::cout << "echo: ready" << std::endl;
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  long echoed = 0;
  mcc::PerfSample sample;
  SampleInfo info;
  while (!stop_requested && (count <= 0 || echoed < count) &&
         (timeout_s <= 0 || std::chrono::steady_clock::now() < end))
  {
    if (!ping->wait_for_unread_message(eprosima::fastrtps::Duration_t(0, 100000000)))
      continue;
    while (ping->take_next_sample(&sample, &info) == ReturnCode_t::RETCODE_OK)
      if (info.valid_data && sample.seq() == 0)  // the end of a run (mcc.bench.latency)
        stop_requested = true;
      else if (info.valid_data)
      {
        pong->write(&sample);
        echoed++;
      }
  }
  std::cout << "echo: " << echoed << " samples" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv)
{
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (std::getenv("MCC_FASTDDS_VERBOSE") != nullptr)  // Fast DDS' own log, e.g. for security
    Log::SetVerbosity(Log::Kind::Info);
  if (argc < 2)
    usage("first argument must be a role");
  std::string role = argv[1];
  argc -= 2;
  argv += 2;
  if (role == "publish")
    return run_publish(argc, argv);
  if (role == "dump")
    return run_dump(argc, argv);
  if (role == "malformed")
    return run_malformed(argc, argv);
  if (role == "radar")
    return run_radar(argc, argv);
  if (role == "console")
    return run_console(argc, argv);
  if (role == "echo")
    return run_echo(argc, argv);
  usage("first argument must be publish, dump, malformed, radar, console or echo, not " + role);
}
