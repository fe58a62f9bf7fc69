package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.ResourceNotFoundException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.errors.UnacceptableCredentialException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * ACLs and SCRAM users through AdminClient, against a broker with an authorizer: admin calls
 * over PLAINTEXT (User:ANONYMOUS, a super user), users log in over SASL_PLAINTEXT
 * (system property weir.sasl.bootstrap) with SCRAM-SHA-512.
 */
@Timeout(120)
class SecuredAdminTest {

    private static Map<String, Object> login(String user, String password) {
        String sasl = System.getProperty("weir.sasl.bootstrap");
        assertTrue(sasl != null && !sasl.isEmpty(), "weir.sasl.bootstrap is not set");
        Map<String, Object> m = new HashMap<>();
        m.put("bootstrap.servers", sasl);
        m.put("security.protocol", "SASL_PLAINTEXT");
        m.put("sasl.mechanism", "SCRAM-SHA-512");
        m.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + user + "\" password=\"" + password + "\";");
        return m;
    }

    private static void upsert(Admin admin, String user, String password, int iterations) throws Exception {
        admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user,
                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, iterations), password)))
                .all().get(30, TimeUnit.SECONDS);
    }

    /** Sends one record as `login`, returns the failure's cause (null when it was written). */
    private static Throwable sendAs(Map<String, Object> login, String topic) {
        return sendAs(login, topic, true);
    }

    private static Throwable sendAs(Map<String, Object> login, String topic, boolean idempotent) {
        Map<String, Object> c = new HashMap<>(login);
        c.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, idempotent);
        c.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 15000);
        c.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 15000);
        c.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        c.put("key.serializer", org.apache.kafka.common.serialization.StringSerializer.class);
        c.put("value.serializer", org.apache.kafka.common.serialization.StringSerializer.class);
        try (KafkaProducer<String, String> p = new KafkaProducer<>(c)) {
            p.send(new ProducerRecord<>(topic, 0, "k", "v")).get(30, TimeUnit.SECONDS);
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (org.apache.kafka.common.KafkaException e) {
            // A fatal InitProducerId error reaches the caller one of two ways, depending on
            // whether send() ran before or after it arrived: through the future, or thrown by
            // send() as "Cannot execute transactional method because we are in an error
            // state" with the broker's error as its cause. Report the broker's error.
            return e.getCause() instanceof org.apache.kafka.common.errors.ApiException ? e.getCause() : e;
        } catch (Exception e) {
            return e;
        }
    }

    @Test
    void scramUsersAreCreatedDescribedAndDeleted() throws Exception {
        String user = Weir.name("java-user");
        try (Admin admin = Weir.admin()) {
            upsert(admin, user, "pw-1", 8192);
            Map<String, UserScramCredentialsDescription> d = admin.describeUserScramCredentials(List.of(user))
                    .all().get(30, TimeUnit.SECONDS);
            assertEquals(List.of(new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)),
                    d.get(user).credentialInfos());
            assertTrue(admin.describeUserScramCredentials().users().get(30, TimeUnit.SECONDS).contains(user));

            // A user without credentials: RESOURCE_NOT_FOUND for it (all() counts that user as
            // described with no credentials, description(user) fails).
            String nobody = Weir.name("java-nobody");
            ExecutionException e = assertThrows(ExecutionException.class, () -> admin.describeUserScramCredentials(
                    List.of(nobody)).description(nobody).get(30, TimeUnit.SECONDS));
            assertInstanceOf(ResourceNotFoundException.class, e.getCause(), e.toString());
            e = assertThrows(ExecutionException.class, () -> upsert(admin, user, "pw", 100));
            assertInstanceOf(UnacceptableCredentialException.class, e.getCause(), e.toString());

            // The user logs in (its Metadata works: the topic exists and is described).
            String topic = Weir.createTopic(admin, "java-scram", 1);
            admin.createAcls(List.of(new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    new AccessControlEntry("User:" + user, "*", AclOperation.WRITE, AclPermissionType.ALLOW))))
                    .all().get(30, TimeUnit.SECONDS);
            assertEquals(null, sendAs(login(user, "pw-1"), topic));
            Throwable wrong = sendAs(login(user, "wrong"), topic);
            assertInstanceOf(SaslAuthenticationException.class, wrong, String.valueOf(wrong));
            // A new password replaces the old one; deleting the credential ends the logins.
            upsert(admin, user, "pw-2", 4096);
            assertEquals(null, sendAs(login(user, "pw-2"), topic));
            Throwable old = sendAs(login(user, "pw-1"), topic);
            assertInstanceOf(SaslAuthenticationException.class, old, String.valueOf(old));
            admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)))
                    .all().get(30, TimeUnit.SECONDS);
            Throwable gone = sendAs(login(user, "pw-2"), topic);
            assertInstanceOf(SaslAuthenticationException.class, gone, String.valueOf(gone));
        }
    }

    @Test
    void aclsAreCreatedDescribedDeletedAndEnforced() throws Exception {
        String user = Weir.name("java-acl-user");
        try (Admin admin = Weir.admin()) {
            upsert(admin, user, "secret", 4096);
            String topic = Weir.createTopic(admin, "java-acl", 1);
            String principal = "User:" + user;
            Map<String, Object> as = login(user, "secret");

            Throwable denied = sendAs(as, topic, false);
            assertInstanceOf(TopicAuthorizationException.class, denied, String.valueOf(denied));

            AclBinding write = new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    new AccessControlEntry(principal, "*", AclOperation.WRITE, AclPermissionType.ALLOW));
            AclBinding read = new AclBinding(new ResourcePattern(ResourceType.TOPIC, "java-acl-", PatternType.PREFIXED),
                    new AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW));
            String group = Weir.name("java-acl-group");
            AclBinding groupRead = new AclBinding(new ResourcePattern(ResourceType.GROUP, group, PatternType.LITERAL),
                    new AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW));
            admin.createAcls(List.of(write, read, groupRead)).all().get(30, TimeUnit.SECONDS);

            AclBindingFilter mine = new AclBindingFilter(ResourcePatternFilter.ANY,
                    new AccessControlEntryFilter(principal, null, AclOperation.ANY, AclPermissionType.ANY));
            Collection<AclBinding> listed = admin.describeAcls(mine).values().get(30, TimeUnit.SECONDS);
            assertEquals(3, listed.size(), listed.toString());
            assertTrue(listed.containsAll(List.of(write, read, groupRead)), listed.toString());
            // MATCH: the ACLs that apply to this topic name, literal and prefixed.
            Collection<AclBinding> matching = admin.describeAcls(new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH),
                    AccessControlEntryFilter.ANY)).values().get(30, TimeUnit.SECONDS);
            assertTrue(matching.containsAll(List.of(write, read)), matching.toString());

            // Now the user writes and reads, in its group.
            assertEquals(null, sendAs(as, topic));
            Map<String, Object> cc = new HashMap<>(as);
            cc.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            cc.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
            cc.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            cc.put("key.deserializer", org.apache.kafka.common.serialization.StringDeserializer.class);
            cc.put("value.deserializer", org.apache.kafka.common.serialization.StringDeserializer.class);
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cc)) {
                c.subscribe(List.of(topic));
                assertEquals("v", Weir.poll(c, 1, Duration.ofSeconds(30)).get(0).value());
                c.commitSync();
                assertEquals(1L, c.committed(java.util.Set.of(new TopicPartition(topic, 0)))
                        .get(new TopicPartition(topic, 0)).offset());
            }

            Collection<AclBinding> deleted = admin.deleteAcls(List.of(new AclBindingFilter(
                    write.pattern().toFilter(), AccessControlEntryFilter.ANY))).all().get(30, TimeUnit.SECONDS);
            assertEquals(List.of(write), List.copyOf(deleted));
            assertEquals(2, admin.describeAcls(mine).values().get(30, TimeUnit.SECONDS).size());
            denied = sendAs(as, topic, false);
            assertInstanceOf(TopicAuthorizationException.class, denied, String.valueOf(denied));
            // An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some
            // topic (KIP-679); with neither, InitProducerId is CLUSTER_AUTHORIZATION_FAILED.
            denied = sendAs(as, topic, true);
            assertInstanceOf(org.apache.kafka.common.errors.ClusterAuthorizationException.class, denied,
                    String.valueOf(denied));

            admin.deleteAcls(List.of(mine)).all().get(30, TimeUnit.SECONDS);
            assertTrue(admin.describeAcls(mine).values().get(30, TimeUnit.SECONDS).isEmpty());
        }
    }

    @Test
    void aUserWithoutClusterAlterCannotManageAcls() throws Exception {
        String user = Weir.name("java-acl-plain");
        try (Admin admin = Weir.admin()) {
            upsert(admin, user, "secret", 4096);
        }
        Map<String, Object> c = login(user, "secret");
        c.put("default.api.timeout.ms", 30000);
        try (Admin asUser = Admin.create(c)) {
            AclBinding b = new AclBinding(new ResourcePattern(ResourceType.TOPIC, "anything", PatternType.LITERAL),
                    new AccessControlEntry("User:" + user, "*", AclOperation.ALL, AclPermissionType.ALLOW));
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> asUser.createAcls(List.of(b)).all().get(30, TimeUnit.SECONDS));
            assertInstanceOf(org.apache.kafka.common.errors.ClusterAuthorizationException.class, e.getCause(), e.toString());
        }
    }
}
